"""Profiling a checked target with Nsight Compute, in the worker, filtered to the target's own
kernels. ncu runs the native driver for plain CUDA (`native_profile_driver`; no Python or torch,
~3 s instead of ~7 s on an H100), falling back to run_once with the reason kept
(`fallback_reason`); run_once for extensions and KernelBench solutions; standalone programs
themselves."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from kernelblaster.folders import CACHE_FIX, made_folder, scratch_folder
from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.native.driver_run import driver_command
from kernelblaster.harness.native.native_driver import setup_failed
from kernelblaster.harness.profile.ncu import run_ncu
from kernelblaster.harness.protocol.records import (
    BuildResult,
    HarnessError,
    ProfileDepth,
    ProfiledProgram,
    ProfileReport,
)
from kernelblaster.harness.target.run_once import RunOnceSpec, program, write_spec
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings

_log = logging.getLogger(__name__)


def _no_progress(*_) -> None:
    pass


def profile_target(
    target: Target,
    built: BuildResult,
    settings: Settings,
    *,
    depth: ProfileDepth,
    kernels: list[str] | None = None,
    progress: Callable[..., None] = _no_progress,
    arch: str | None = None,
) -> tuple[ProfileReport | None, HarnessError | None]:
    """`kernels`: the names to profile (None: every kernel the file defines). `arch`: the
    GPU's (e.g. "sm_90"), for the metrics only some architectures have. A plain target goes
    through the native driver when `settings.native_profile_driver` says so (the GPU test and
    bench/profile_driver.py compare the two paths by that setting)."""
    source = Path(target.source)
    # Beside the build in the cache; a KernelBench solution has no build of ours (load_inline
    # builds it), so a folder of its own in the cache. Never the user's folder.
    if built.artifact:
        work_dir = made_folder(Path(built.artifact).parent / "profile", fix=CACHE_FIX)
    else:
        work_dir = settings.cache_folder("profile", hashlib.sha256(bytes(source)).hexdigest()[:16])
    names = kernels or kernel_names(source)
    # Where the profile's seconds go (ProfileReport.phase_seconds): ncu's runs, the set-up before
    # them (`ncu_prepare`) and reading the report (`ncu_read`).
    seconds: dict[str, float] = {}

    def profile(command: list[str]) -> tuple[Path | None, HarnessError | None]:
        ran: dict[str, float] = {}
        try:
            return run_ncu(
                command,
                kernels=names,
                depth=depth,
                report_path=work_dir / f"{source.stem}.ncu-rep",
                settings=settings,
                cwd=source.parent,
                arch=arch,
                progress=progress,
                seconds=ran,
            )
        finally:
            for phase, spent in ran.items():
                seconds[phase] = round(seconds.get(phase, 0.0) + spent, 4)

    def run_once() -> list[str]:
        spec = RunOnceSpec(target=target, artifact=built.artifact, gpu_index=settings.gpu)
        return program(write_spec(spec, work_dir))

    progress("profile", f"ncu ({depth}) on {', '.join(names) or 'all kernels'}")
    began = time.perf_counter()
    used: ProfiledProgram = "run_once"
    fallback_reason = ""
    if target.kind == "standalone":
        used = "program"
        report_path, error = profile([str(built.artifact), *target.args])
    elif target.kind == "plain" and settings.native_profile_driver:
        used = "native_driver"
        # The driver's input data is as large as the inputs: written for this run only.
        with scratch_folder(work_dir, "driver-", fix=CACHE_FIX) as scratch:
            command, fallback_reason = driver_command(target, built, settings, scratch)
            seconds["ncu_prepare"] = round(time.perf_counter() - began, 4)
            if command is not None:
                report_path, error = profile(command)
                why = setup_failed(error.log) if error is not None else None
                if why is not None:
                    fallback_reason = f"the driver could not set the call up: {why}"
        if fallback_reason:
            used = "run_once"
            _log.warning("profiling %s through run_once: %s", source.name, fallback_reason)
            progress("profile", f"profiling through run_once: {fallback_reason}")
    if used == "run_once":
        prepared = time.perf_counter()
        once = run_once()
        seconds["ncu_prepare"] = round(
            seconds.get("ncu_prepare", 0.0) + time.perf_counter() - prepared, 4
        )
        report_path, error = profile(once)
    if error is not None or report_path is None:
        return None, error
    read = time.perf_counter()
    report = read_report(report_path, depth=depth)
    seconds["ncu_read"] = round(time.perf_counter() - read, 4)
    report.seconds = time.perf_counter() - began
    report.program = used
    report.fallback_reason = fallback_reason
    report.phase_seconds = {**report.phase_seconds, **seconds}
    return report, None
