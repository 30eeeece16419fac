"""On a GPU: build five.cu with -lineinfo, profile it with the real ncu at both depths, read and
classify. Prints the profiling time per kernel (run with -s). With KERNELBLASTER_CAPTURE_DIR set,
the reports are copied there, to be kept as fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from profile_cases import CASES

from kernelblaster.agents.state import classify
from kernelblaster.harness.ncu import run_ncu
from kernelblaster.harness.ncu_reader import read_report
from kernelblaster.settings import Settings

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
