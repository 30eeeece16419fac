"""Profiling a checked target with Nsight Compute, in the worker: the same run_once program (or
the standalone executable) under ncu, filtered to the target's own kernels."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kernelblaster.harness.cuda_source import global_kernels
from kernelblaster.harness.ncu import run_ncu
from kernelblaster.harness.ncu_reader import read_report
from kernelblaster.harness.records import BuildResult, HarnessError, ProfileReport
from kernelblaster.harness.run_once import RunOnceSpec, program, write_spec
from kernelblaster.harness.targets import Target
from kernelblaster.settings import Settings


def profile_target(
    target: Target,
    built: BuildResult,
    settings: Settings,
    *,
    depth: str,
    kernels: list[str],
    progress: Callable[..., None],
) -> tuple[ProfileReport | None, HarnessError | None]:
    source = Path(target.source)
    work_dir = Path(built.artifact or source).parent / "profile"
    work_dir.mkdir(parents=True, exist_ok=True)
    if target.kind == "standalone":
        command = [str(built.artifact), *target.args]
    else:
        spec = RunOnceSpec(target=target, artifact=built.artifact, gpu_index=settings.gpu_index)
        command = program(write_spec(spec, work_dir))
    names = kernels or [k.name for k in global_kernels(source.read_text(encoding="utf-8"))]
    progress("profile", f"ncu ({depth}) on {', '.join(names) or 'all kernels'}")
    began = time.perf_counter()
    report_path, error = run_ncu(
        command,
        kernels=names,
        depth=depth,
        report_path=work_dir / f"{source.stem}.ncu-rep",
        settings=settings,
        cwd=source.parent,
    )
    if error is not None or report_path is None:
        return None, error
    report = read_report(report_path, depth=depth)
    report.seconds = time.perf_counter() - began
    return report, None
