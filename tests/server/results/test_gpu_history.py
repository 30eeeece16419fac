"""On a GPU machine: two saves of a kernel at different speeds, built, verified, timed and
profiled by the real worker, give the right delta (the factor of the two medians the history
recorded) in the timing diagnostic and the status bar, the history keeps both points with their
states and roofline points on this GPU, and a third, slower save is flagged as a regression.
The history is written to $KERNELBLASTER_GPU_HISTORY (if set) for the record."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from lsprotocol import types

from bench.lsp_session import wait_until
from kernelblaster.server.results.cache import ResultCache
from kernelblaster.server.results.history import SaveHistory
from tests.conftest import REPO
from tests.server.conftest import by_code, edit_and_save, open_document, start

# relu with each warp's lanes 2^19 elements apart: every load and store its own sector, so
# several times slower than the example's coalesced version, and still exactly right.
UNCOALESCED = """#include <cuda_runtime.h>

__global__ void relu_naive(const float* x, float* y, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int i = (t % 32) * (n / 32) + t / 32;  // n is a multiple of 32
    if (t < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

extern "C" void relu(const float* x, float* y, int n, cudaStream_t stream) {
    int block = 128;
    relu_naive<<<(n + block - 1) / block, block, 0, stream>>>(x, y, n);
}
"""
FACTOR = re.compile(r"([\d.]+)× (faster|slower) than the previous save")


def _done(client) -> int:
    return len([s for s in client.job_status if s.phase == "done"])


async def _save(client, uri, source, text, version) -> types.Diagnostic:
    done = _done(client)
    edit_and_save(client, uri, source, text, version)
    await wait_until(lambda: _done(client) > done, timeout=600)
    (timing,) = by_code(client.diagnostics[uri], "timing")
    return timing


@pytest.mark.gpu
async def test_two_saves_of_different_speed_give_the_right_delta_and_history(client, workspace):
    shutil.copyfile(REPO / "examples" / "relu.py", workspace.root / "relu.py")
    source = workspace.add("relu.cu", UNCOALESCED)
    cache = workspace.root / "cache"
    # the real worker; ncu at full depth for the roofline's counts
    await start(client, workspace, workerCommand=None, cacheDir=str(cache), ncuDepth="full")
    uri = open_document(client, source)
    await wait_until(lambda: _done(client) >= 1, timeout=600)
    (first,) = by_code(client.diagnostics[uri], "timing")
    assert "previous save" not in first.message, first.message

    coalesced = (REPO / "examples" / "relu.cu").read_text()
    faster = await _save(client, uri, source, coalesced, 2)
    history = json.loads(SaveHistory(ResultCache(cache)).file_for(source).read_bytes())
    if out := os.environ.get("KERNELBLASTER_GPU_HISTORY"):
        with open(out, "w") as handle:
            json.dump(history, handle, indent=1)
    slow, fast = history["points"]
    expected = slow["median_ms"] / fast["median_ms"]
    assert expected > 1.5, history  # uncoalesced vs coalesced: clearly apart, not noise
    match = FACTOR.search(faster.message)
    assert match is not None and match.group(2) == "faster", faster.message
    assert float(match.group(1)) == pytest.approx(expected, rel=0.01)
    assert "faster since opened" in faster.message
    assert faster.severity == types.DiagnosticSeverity.Information
    assert "faster than the previous save" in client.job_status[-1].message
    assert history["gpu"], history  # the device's name, from the worker's check
    slow_kernel, fast_kernel = (p["kernels"]["relu_naive"] for p in (slow, fast))
    for kernel in (slow_kernel, fast_kernel):
        assert kernel["state"] and kernel["duration_ms"] > 0
        assert kernel["dram_bytes_per_s"] > 0
    # ncu's own kernel times agree with the harness's medians on which is faster
    assert slow_kernel["duration_ms"] > fast_kernel["duration_ms"]

    slower = await _save(client, uri, source, UNCOALESCED + "// again\n", 3)
    assert " — regression: " in slower.message, slower.message
    assert "slower than the previous save" in slower.message
    assert slower.severity == types.DiagnosticSeverity.Warning
