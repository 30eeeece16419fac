"""The build with the reference side of the check made beside it (harness/build/beside.py): real
threads, real nvcc where it runs, references made on the CPU. Through real worker processes
(tests/harness/cpu_worker.py: the real worker, the CPU standing in for the GPU): a build that
fails while the reference prepares is reported exactly as a build alone is, a preparation
that outlasts the build runs on the check's budget, and a cancel mid-build leaves nothing
running."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.build.beside import build_beside
from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.protocol.worker_client import run_harness, run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.harness.target.reference_side import prepare_reference_side
from kernelblaster.settings import Settings
from tests.process_leaks import compilers_running, leftovers, none_left, slow_nvcc, wait_for

CPU_WORKER = Path(__file__).resolve().parents[1] / "cpu_worker.py"

# A ReLU reference whose get_inputs() logs each call to LOG, then takes SECONDS.
SLOW_REFERENCE = """
import time
import torch
from torch import nn
n = 1 << 12
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    with open({log!r}, "a") as log:
        log.write("inputs\\n")
    time.sleep({seconds})
    return [torch.randn(n)]
def get_init_inputs():
    return []
"""
GOOD_KERNEL = """
__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
extern "C" void relu(const float* x, float* y, int n) { relu_k<<<(n + 255) / 256, 256>>>(x, y, n); }
"""
BROKEN_KERNEL = GOOD_KERNEL.replace("y[i] = x[i]", "y[i] = undeclared_name + x[i]")
# every set the reference side makes for 3 trials: the probe, the warm-up, 3 trials and the
# recheck, decoys for trials 0 and 2 and the recheck
ALL_SETS = 1 + 1 + 4 + 3


def _pair(folder: Path, kernel: str, seconds: float) -> tuple[Path, Path]:
    source, reference = folder / "relu.cu", folder / "relu.py"
    source.write_text(kernel)
    reference.write_text(SLOW_REFERENCE.format(log=str(folder / "inputs.log"), seconds=seconds))
    return source, reference


def _sets_made(folder: Path) -> int:
    log = folder / "inputs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _settings(folder: Path, **overrides) -> Settings:
    return Settings(cache_dir=str(folder / "cache"), arch="sm_90", **overrides)


# --- build_beside on its own ---------------------------------------------------------------


def _built(ok: bool = True) -> BuildResult:
    return BuildResult(ok=ok, source="k.cu", arch="sm_90")


def test_a_preparation_outlasting_the_build_is_announced_and_measured():
    announced = threading.Event()

    def prepare(abandon) -> str:
        assert announced.wait(10), "the build's end was never announced"
        return "prepared"

    beside = build_beside(_built, prepare, still_preparing=announced.set)
    assert beside.built.ok and beside.prepared == "prepared"
    assert beside.prepared_after_build_s > 0.0


def test_a_build_outlasting_the_preparation_is_not_announced():
    prepared = threading.Event()
    announced = []

    def slow_build() -> BuildResult:
        assert prepared.wait(10)
        return _built()

    def prepare(abandon) -> str:
        prepared.set()
        return "prepared"

    beside = build_beside(slow_build, prepare, still_preparing=lambda: announced.append(1))
    assert beside.prepared == "prepared" and announced == []
    assert beside.prepared_after_build_s == 0.0


@pytest.mark.parametrize("outcome", ["fails", "raises"])
def test_a_failing_build_abandons_the_preparation(outcome):
    def failing_build() -> BuildResult:
        if outcome == "raises":
            raise RuntimeError("a bug in the build")
        return _built(ok=False)

    def prepare(abandon) -> str:
        assert wait_for(abandon, timeout=10), "never told to stop"
        return "half-made"

    if outcome == "raises":
        with pytest.raises(RuntimeError, match="a bug in the build"):
            build_beside(failing_build, prepare)
    else:
        beside = build_beside(failing_build, prepare)
        assert not beside.built.ok and beside.prepared is None


@pytest.mark.nvcc
def test_nvcc_failing_while_the_reference_prepares(tmp_path):
    """A real failed build beside a real (slow) reference side: the same result as the build
    alone, and the reference side stopped at its next set, not made to the end."""
    source, reference = _pair(tmp_path, BROKEN_KERNEL, seconds=0.5)
    settings = _settings(tmp_path)
    spec = BuildSpec(source=str(source), output_kind="shared", arch="sm_90")
    cpu = torch.device("cpu")
    sides = []

    def prepare(abandon):
        sides.append(prepare_reference_side(reference, cpu, trials=3, abandon=abandon))
        return sides[-1]

    beside = build_beside(lambda: build(spec, settings), prepare)
    alone = build(spec, settings)
    assert not beside.built.ok and beside.prepared is None
    assert beside.built.error == alone.error and beside.built.error.kind == "build_failed"
    assert beside.built.diagnostics == alone.diagnostics
    assert any("undeclared_name" in d.message for d in alone.diagnostics)
    assert sides[0].failure is None and _sets_made(tmp_path) < ALL_SETS


# --- through real worker processes ---------------------------------------------------------


def _request(source: Path, settings: Settings) -> WorkerRequest:
    return WorkerRequest(task="check", source=str(source), settings=settings)


@pytest.mark.nvcc
def test_a_worker_reports_a_failed_build_as_it_did_without_the_reference_beside(tmp_path):
    source, _ = _pair(tmp_path, BROKEN_KERNEL, seconds=0.5)
    beside = _settings(tmp_path, worker_command=[sys.executable, str(CPU_WORKER), str(tmp_path)])
    response = run_harness_sync(_request(source, beside), beside)
    assert _sets_made(tmp_path) >= 1  # the reference side was under way
    # the real worker on this machine: no GPU, so no reference side beside its build
    alone = run_harness_sync(_request(source, _settings(tmp_path)), _settings(tmp_path))
    assert response.error is not None and response.error.kind == "build_failed"
    assert response.error == alone.error and response.check is None
    assert response.build.diagnostics == alone.build.diagnostics


@pytest.mark.nvcc
def test_a_reference_still_preparing_after_the_build_runs_on_the_checks_budget(tmp_path):
    # get_inputs() that takes a minute: killed as a hung check, not as a slow compile
    source, _ = _pair(tmp_path, GOOD_KERNEL, seconds=60)
    settings = _settings(
        tmp_path,
        worker_command=[sys.executable, str(CPU_WORKER), str(tmp_path)],
        run_timeout_s=3.0,
        build_timeout_s=60.0,  # not the budget it ends on (nvcc takes a few seconds)
    )
    response = run_harness_sync(_request(source, settings), settings)
    assert response.error is not None and response.error.kind == "timeout"
    assert "The verify phase did not finish within 3 s" in response.error.message
    assert "run_timeout_s" in response.error.fix
    assert none_left(tmp_path) == []


@pytest.mark.parametrize("how", ["cancel", "sigterm"])
def test_a_worker_stopped_mid_build_leaves_nothing_running(tmp_path, how):
    source, _ = _pair(tmp_path, GOOD_KERNEL, seconds=1.0)
    settings = _settings(
        tmp_path,
        nvcc=str(slow_nvcc(tmp_path)),
        worker_command=[sys.executable, str(CPU_WORKER), str(tmp_path)],
    )

    async def stop_mid_build() -> None:
        task = asyncio.ensure_future(run_harness(_request(source, settings), settings))
        both = lambda: compilers_running(tmp_path) and _sets_made(tmp_path) >= 1  # noqa: E731
        assert await asyncio.to_thread(wait_for, both, 60), "never built and prepared at once"
        if how == "cancel":
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            (worker,) = [p for p in leftovers(tmp_path) if str(CPU_WORKER) in p.cmdline()]
            worker.send_signal(signal.SIGTERM)
            response = await task
            assert response.error is not None and response.error.kind == "crash"

    asyncio.run(stop_mid_build())
    assert none_left(tmp_path) == []
