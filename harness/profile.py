"""Profiling a checked target with Nsight Compute, in the worker: the same run_once program (or
the standalone executable) under ncu, filtered to the target's own kernels."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from kernelblaster.harness.cuda_source import kernel_names
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
    arch: str | None = None,
) -> tuple[ProfileReport | None, HarnessError | None]:
    """`arch`: the GPU's (e.g. "sm_90"), for the metrics only some architectures have."""
    source = Path(target.source)
    # Beside the build in the cache; a KernelBench solution has no build of ours (load_inline
    # builds it), so a folder of its own in the cache. Never the user's folder.
    if built.artifact:
        work_dir = Path(built.artifact).parent / "profile"
    else:
        folder = hashlib.sha256(bytes(source)).hexdigest()[:16]
        work_dir = settings.cache_root() / "profile" / folder
    work_dir.mkdir(parents=True, exist_ok=True)
    if target.kind == "standalone":
        command = [str(built.artifact), *target.args]
    else:
        spec = RunOnceSpec(target=target, artifact=built.artifact, gpu_index=settings.gpu)
        command = program(write_spec(spec, work_dir))
    names = kernels or kernel_names(source)
    progress("profile", f"ncu ({depth}) on {', '.join(names) or 'all kernels'}")
    began = time.perf_counter()
    report_path, error = run_ncu(
        command,
        kernels=names,
        depth=depth,
        report_path=work_dir / f"{source.stem}.ncu-rep",
        settings=settings,
        cwd=source.parent,
        arch=arch,
    )
    if error is not None or report_path is None:
        return None, error
    report = read_report(report_path, depth=depth)
    report.seconds = time.perf_counter() - began
    return report, None
