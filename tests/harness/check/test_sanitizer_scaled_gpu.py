"""On a GPU, through the real worker: compute-sanitizer checks KernelBench's level-2 GEMM
(12_Gemm_Multiply_LeakyReLU, batch_size 512) at batch_size 32 (harness/check/sanitizer_inputs.py)
and says so; an out-of-bounds write it finds there is confirmed at the full size and fails the
kernel with its line; a kernel whose source names the batch size is checked at the full size.
Issue 42's sanitizer step took 98 s on this GEMM's best candidate at the full size: the
seconds each run took are printed (bench/fresh_machine.py records them), never asserted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import load_settings

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

REPO = Path(__file__).resolve().parents[3]
PROBLEM = REPO / "bench" / "kernelbench" / "level2" / "12_Gemm_Multiply_LeakyReLU.py"
FAST = REPO / "bench" / "kernelbench" / "answers" / "12_Gemm_Multiply_LeakyReLU.fast.cu"
STORE = "        y[(size_t)m * N + n] = v >= 0.0f ? v : v * negative_slope;"


def sanitized(tmp_path: Path, kernel: str) -> WorkerResponse:
    shutil.copyfile(PROBLEM, tmp_path / "gemm.py")
    source = tmp_path / "gemm.cu"
    source.write_text(kernel)
    settings = load_settings(source, environ={}).merged({"cache_dir": str(tmp_path / "cache")})
    request = WorkerRequest(task="check", source=str(source), settings=settings, sanitize=True)
    response = run_harness_sync(request, settings)
    assert response.check is not None and response.check.sanitizer is not None, response
    print(response.check.sanitizer.summary, f"{response.check.sanitizer.seconds:.1f} s")
    return response


def test_the_gemm_is_checked_at_a_smaller_batch_and_passes(tmp_path):
    response = sanitized(tmp_path, FAST.read_text())
    run = response.check.sanitizer
    assert response.error is None and response.check.verify.ok
    assert run.status == "passed" and run.tools == ["memcheck", "racecheck"]
    assert run.inputs == "get_inputs() at batch_size 32 instead of 512"


def test_a_write_past_the_output_is_found_and_confirmed_at_the_full_size(tmp_path):
    # the last row's threads write one row past y (at any batch size)
    text = FAST.read_text()
    assert STORE in text
    broken = text.replace(STORE, STORE.replace("(size_t)m * N", "(size_t)(m + (m == M - 1)) * N"))
    response = sanitized(tmp_path, broken)
    run = response.check.sanitizer
    assert run.status == "failed" and not response.check.verify.ok
    assert run.inputs.startswith("get_inputs() as written (at batch_size 32 it reported")
    (line,) = {h.line for h in response.check.verify.hacks if h.kind == "memcheck"}
    assert broken.splitlines()[line - 1].strip().startswith("y[(size_t)(m + (m == M - 1))")


def test_a_kernel_naming_the_batch_size_is_checked_at_it(tmp_path):
    text = FAST.read_text().replace("if (m < M && n < N) {", "if (m < 512 && n < N) {")
    response = sanitized(tmp_path, text)
    run = response.check.sanitizer
    assert run.status == "passed"
    assert run.inputs.startswith("get_inputs() as written (batch_size 512: the kernel's source")
