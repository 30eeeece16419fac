"""On a GPU: build five.cu with -lineinfo, profile it with the real ncu at both depths, read and
classify; and cuBLAS's own bf16 GEMM, a tensor-core kernel at its roof. Prints the profiling
time per kernel (run with -s). With KERNELBLASTER_CAPTURE_DIR set, the reports are copied
there, to be kept as fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.profile.ncu import run_ncu
from kernelblaster.settings import Settings
from tests.harness.profile_cases import CASES

FIVE = next(case for case in CASES if case.name == "h100-five")


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize("depth", ["quick", "full"])
def test_profile_five_kernels_on_the_device(tmp_path, depth):
    source = tmp_path / "five.cu"
    shutil.copy(FIVE.source, source)
    program = tmp_path / "five"
    subprocess.run(
        ["nvcc", "-O3", "-arch=native", "-lineinfo", "-o", str(program), str(source)],
        check=True,
        timeout=300,
    )
    expected = {kernel.name: kernel for kernel in FIVE.kernels}
    started = time.perf_counter()
    report_path, error = run_ncu(
        [str(program)],
        kernels=sorted(expected),
        depth=depth,
        report_path=tmp_path / f"five-{depth}",
        settings=Settings(),
        cwd=tmp_path,
    )
    seconds = time.perf_counter() - started
    assert error is None, f"{error.kind}: {error.message}\n{error.log}"
    assert report_path is not None
    report = read_report(report_path, depth=depth)
    # the fill kernels five.cu also launches are filtered out
    assert sorted(kernel.name for kernel in report.kernels) == sorted(expected)
    print(f"\nncu {depth} on {report.device}: {seconds:.1f} s for {len(expected)} kernels")
    for kernel in report.kernels:
        state = classify(kernel, arch=report.arch, device=report.device)
        print(f"  {kernel.name}: {state.state} | {state.summary}")
        assert state.bottleneck == expected[kernel.name].bottleneck, state.summary
    if depth == "full":
        transpose = next(k for k in report.kernels if k.name == "transpose_naive")
        state = classify(transpose, arch=report.arch)
        uncoalesced = next(f for f in state.findings if f.id == "uncoalesced_global_access")
        assert uncoalesced.lines == [13]
    if capture := os.environ.get("KERNELBLASTER_CAPTURE_DIR"):
        Path(capture).mkdir(parents=True, exist_ok=True)
        shutil.copy(report_path, Path(capture) / report_path.name)


# cuBLAS's bf16 GEMM (an nvjet / sm90 wgmma kernel on Hopper), after the operands are made.
CUBLAS_GEMM = """
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
c = a @ b
torch.cuda.synchronize()
"""
OCCUPANCY_FINDINGS = {
    "occupancy_limited_registers",
    "occupancy_limited_shared_memory",
    "occupancy_limited_block_size",
    "low_achieved_occupancy",
}


def _device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


@pytest.mark.gpu
@pytest.mark.parametrize("depth", ["quick", "full"])
def test_cublas_bf16_gemm_is_compute_bound_near_its_limit(tmp_path, depth):
    program = tmp_path / "cublas_gemm.py"
    program.write_text(CUBLAS_GEMM)
    report_path, error = run_ncu(
        [sys.executable, str(program)],
        kernels=[],
        depth=depth,
        report_path=tmp_path / f"cublas-gemm-{depth}",
        settings=Settings(),
        cwd=tmp_path,
        arch=_device_arch(),
    )
    assert error is None, f"{error.kind}: {error.message}\n{error.log}"
    report = read_report(report_path, depth=depth)
    gemm = max(report.kernels, key=lambda kernel: kernel.duration_ns or 0.0)  # not randn's
    state = classify(gemm, arch=report.arch, device=report.device)
    print(f"\n{gemm.name} ({depth}): {state.state} | {state.summary}")
    print(
        {name: value for name, value in gemm.metrics.items() if "tensor" in name or "pct" in name}
    )
    assert (state.bottleneck, state.state) == ("compute", "compute.tensor"), state.summary
    assert state.near_limit, state.summary
    assert not {finding.id for finding in state.findings} & OCCUPANCY_FINDINGS
    if capture := os.environ.get("KERNELBLASTER_CAPTURE_DIR"):
        Path(capture).mkdir(parents=True, exist_ok=True)
        shutil.copy(report_path, Path(capture) / report_path.name)
