"""The quick profile's counters collected inside the worker with CUPTI (issue 14): no process under
ncu (3-12 s), each kernel replayed in place after a warm-up call, L2 flushed. Each launch of the
target's kernels becomes a KernelProfile with ncu's metric names, read like a quick ncu report.
Refused, for ncu instead (`counters_failed`): standalone programs, over MAX_LAUNCHES launches,
and a worker where torch.profiler ran first (kineto keeps CUPTI's one subscriber). Occupancy
ignores thread-block clusters. Worker side: imports torch."""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import torch

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.counter_metrics import COUNTER_METRICS, launch_metrics
from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.analysis.ptxas import demangle, short_name
from kernelblaster.harness.check import cupti
from kernelblaster.harness.check.timing import CudaClock
from kernelblaster.harness.protocol.cuda_errors import error_from_exception
from kernelblaster.harness.protocol.profiling_lock import one_profile_at_a_time
from kernelblaster.harness.protocol.records import (
    BuildResult,
    HarnessError,
    KernelProfile,
    LaunchConfig,
    ProfileReport,
)
from kernelblaster.harness.target.reference import ReferenceError_
from kernelblaster.harness.target.run_once import RunOnceSpec, prepare_call
from kernelblaster.harness.target.targets import CALLED_KINDS, Target
from kernelblaster.settings import Settings

_log = logging.getLogger(__name__)

MAX_LAUNCHES = 64  # kernel launches one profiled call may make (the counter data's ranges)


class CounterRun(msgspec.Struct, kw_only=True):
    """What one in-process profile produced: the report or the error, and for diagnostics
    (bench/counters_probe.py) the CUPTI that ran, the metric plan, the raw session, the call
    that failed and where the time went."""

    report: ProfileReport | None = None
    error: HarnessError | None = None
    library: cupti.LibraryInfo | None = None
    library_files: list[str] = []  # the libcupti/libnvperf/libcuda files the process holds
    prepared: cupti.Prepared | None = None
    begun: cupti.Begun | None = None
    session: cupti.SessionRecord | None = None
    failure: cupti.CuptiError | None = None
    phase_seconds: dict[str, float] = {}


def _no_progress(*_) -> None:
    pass


def warm_up(settings: Settings) -> None:
    """What every in-process profile here starts with, done ahead while nvcc builds: the counter
    library built and loaded, and CUPTI's profiler set up for COUNTER_METRICS. What fails here is
    met again, and reported, by `collect_counters`."""
    library, toolkit = cupti.build_library(settings)
    if not library.ok or library.artifact is None or toolkit is None:
        return
    loaded = cupti.load_library(library.artifact, toolkit)
    device = torch.device("cuda", settings.gpu)
    torch.cuda.set_device(device)  # the primary context, current on this thread too
    torch.cuda.init()
    loaded.prepare(COUNTER_METRICS)


def profile_in_process(
    target: Target, built: BuildResult, settings: Settings, **options
) -> tuple[ProfileReport | None, HarnessError | None]:
    """The quick profile of `target`'s kernels collected in this process, or why not, as
    profile_target answers; `options` are collect_counters's (kernels, replay, progress)."""
    run = collect_counters(target, built, settings, **options)
    torch.cuda.empty_cache()  # a profile through ncu may follow: its process needs the memory
    return run.report, run.error


class _Laps:
    """Wall time per phase, each lap ending where the next begins."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds = seconds
        self.began = self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self._last = now

    def total(self) -> float:
        self.seconds["total"] = time.perf_counter() - self.began
        return self.seconds["total"]


def collect_counters(
    target: Target,
    built: BuildResult,
    settings: Settings,
    *,
    kernels: list[str] | None = None,
    replay: cupti.Replay = "kernel",
    progress: Callable[..., None] = _no_progress,
) -> CounterRun:
    """`profile_in_process`, with everything it learnt on the way. `kernels`: the names to
    keep (None: every kernel the source defines); `replay`: "kernel" (CUPTI replays each
    kernel in place) or "user" (the launcher is called once per pass)."""
    run = CounterRun()
    laps = _Laps(run.phase_seconds)
    run.error = _refusal(target, settings)
    if run.error is not None:
        return run
    names = kernels or kernel_names(Path(target.source))
    progress("profile", f"counters in process on {', '.join(names) or 'all kernels'}")
    library, run.error = cupti.open_library(settings, arch=built.arch or None)
    laps.lap("library")
    if library is None:
        return run
    device = torch.device("cuda", settings.gpu)
    try:
        run.library = library.info()
        spec = RunOnceSpec(target=target, artifact=built.artifact, gpu_index=settings.gpu)
        candidate, inputs = prepare_call(spec)
        candidate.poison = False
        l2 = CudaClock(device)
        with torch.no_grad():
            candidate(inputs)
        torch.cuda.synchronize(device)
        laps.lap("inputs")
        run.prepared = library.prepare(COUNTER_METRICS, progress)
        run.phase_seconds.update(run.prepared.seconds)
        laps.lap("prepare")
        if not run.prepared.cached:
            _log_unsupported(run.prepared)
        # From begin to end, CUPTI's profiler holds the GPU's counters: no ncu of ours beside.
        with one_profile_at_a_time(progress):
            laps.lap("lock")  # the wait for another profile, if there was one
            run.begun = library.begin(replay, MAX_LAUNCHES)
            run.phase_seconds.update(run.begun.seconds)
            laps.lap("begin")
            passes = run.prepared.passes if replay == "user" else 1
            run.session = _profiled_call(
                library, lambda: candidate(inputs), l2, replay, passes, laps
            )
        run.phase_seconds.update(run.session.seconds)
    except ReferenceError_ as exc:
        run.error = exc.error
    except cupti.CuptiFailure as failure:
        run.failure = failure.error
        run.error = cupti.harness_error(failure.error)
        if run.library is not None and run.library.older_than_headers:
            run.error.message += (
                f" The libcupti running it ({run.library.libcupti}, API "
                f"{run.library.runtime_cupti_api}) is older than the CUPTI headers the library "
                f"was built with (API {run.library.compiled_cupti_api}); loading the toolkit's "
                "CUPTI before torch (harness/cupti.preload_toolkit_cupti) avoids that."
            )
    except (RuntimeError, ctypes.ArgumentError) as exc:  # the launcher's or the kernel's
        run.error = error_from_exception(exc, kernels=set(names))
    finally:
        run.library_files = cupti.library_files()
    if run.error is None and run.session is not None and run.prepared is not None:
        profiles, run.error = kernel_profiles(run.session, run.prepared, names, built, replay)
        laps.lap("report")
        if run.error is None:
            run.report = ProfileReport(
                device=torch.cuda.get_device_name(device),
                arch=run.prepared.arch,
                depth="quick",
                kernels=profiles,
                program="in_process",
                phase_seconds=run.phase_seconds,
            )
    seconds = laps.total()
    if run.report is not None:
        run.report.seconds = seconds
    return run


def _refusal(target: Target, settings: Settings) -> HarnessError | None:
    if target.kind not in CALLED_KINDS:
        return HarnessError(
            kind="counters_failed",
            message=f"In-process counters cover calls in the worker only: a {target.kind} "
            "target runs as a process of its own.",
            fix="It is profiled through Nsight Compute (ncu) instead.",
        )
    from kernelblaster.harness.check.check import gpu_problem

    return gpu_problem(settings)


def _log_unsupported(prepared: cupti.Prepared) -> None:
    for unsupported in prepared.unsupported:
        _log.info(
            "%s has no metric %s (%s): left out of the counters",
            prepared.chip,
            unsupported.metric,
            unsupported.reason,
        )


def _profiled_call(
    library: cupti.CounterLibrary,
    call: Callable[[], object],
    l2: CudaClock,
    replay: cupti.Replay,
    passes: int,
    laps: _Laps,
) -> cupti.SessionRecord:
    """`call` profiled in the session `library.begin` opened: once (kernel replay), or once
    per pass of the metric schedule (user replay), each time after an L2 flush; the session's
    counters and launches. The session is closed whatever happens."""
    try:
        for _ in range(passes + 1):
            l2.flush_l2()
            l2.synchronize()
            library.start_pass()
            with torch.no_grad():
                call()
            if library.stop_pass().all_passes_submitted:
                break
        else:
            raise cupti.CuptiFailure(
                cupti.CuptiError(
                    api="library",
                    call="cuptiRangeProfilerStop",
                    code=0,
                    name="passes left",
                    message=f"CUPTI still wanted passes after {passes + 1} ({replay} replay)",
                )
            )
    except BaseException:
        cupti.after_failure(library.abort, "disabling CUPTI's profiler")
        raise
    laps.lap("replay")
    session = library.end()
    laps.lap("end")
    return session


def kernel_profiles(
    session: cupti.SessionRecord,
    prepared: cupti.Prepared,
    names: list[str],
    built: BuildResult,
    replay: cupti.Replay,
) -> tuple[list[KernelProfile], HarnessError | None]:
    """One KernelProfile per launch of a kernel in `names`, in launch order: range i holds the
    counters of the i-th launch of a pass. Launches the driver refused made no range."""
    if session.launch_records_error:
        return [], _failed(f"the launches were not recorded: {session.launch_records_error}")
    launched = [launch for launch in session.launches if launch.status == 0]
    first = [launch for launch in launched if launch.pass_index == 0]
    sequence = [launch.name for launch in first]
    passes = {launch.pass_index for launch in launched}
    for index in sorted(passes - {0}):
        again = [launch.name for launch in launched if launch.pass_index == index]
        if again != sequence:
            return [], _failed(
                f"the launcher launched other kernels in pass {index} of the {replay} replay "
                f"({', '.join(again) or 'none'}) than in the first ({', '.join(sequence)})"
            )
    if session.dropped_ranges or len(session.ranges) != len(first):
        return [], _failed(
            f"CUPTI measured {len(session.ranges)} ranges ({session.dropped_ranges} dropped) "
            f"for {len(first)} kernel launches ({', '.join(sequence) or 'none'}); one call may "
            f"launch at most {MAX_LAUNCHES}"
        )
    readable = demangle(sequence)
    wanted = set(names)
    profiles = []
    for launch, measured in zip(first, session.ranges, strict=True):
        demangled = readable.get(launch.name, launch.name)
        name = short_name(demangled)
        if name not in wanted:
            continue
        resources = _resources(launch, built)
        if resources is None:
            return [], _failed(
                f"the registers of {name} could not be read: {launch.attribute_error}"
            )
        registers, shared_static = resources
        launch_config = LaunchConfig(
            grid=launch.grid,
            block=launch.block,
            registers_per_thread=registers,
            shared_static_bytes=shared_static,
            shared_dynamic_bytes=launch.shared_dynamic,
        )
        metrics = {
            metric: value
            for metric, value in zip(session.metrics, measured.values, strict=True)
            if value is not None
        }
        metrics |= launch_metrics(launch_config, arch=prepared.arch, sm_count=prepared.sm_count)
        launch_config.waves_per_sm = metrics.get(m.WAVES)
        profiles.append(
            KernelProfile(
                name=name,
                demangled=demangled,
                duration_ns=metrics.get(m.DURATION),
                launch=launch_config,
                metrics=metrics,
            )
        )
    if not profiles:
        launched_names = ", ".join(short_name(readable.get(n, n)) for n in sequence) or "none"
        return [], HarnessError(
            kind="ncu_replay_failed",
            message=f"The launcher launched no kernel matching {', '.join(names)} "
            f"(it launched: {launched_names}).",
            fix="Check that the launcher launches the file's kernels.",
        )
    return profiles, None


def _resources(launch: cupti.LaunchRecord, built: BuildResult) -> tuple[int, int] | None:
    """(registers per thread, static shared memory) of the launched function: the driver's
    answer, else ptxas's for the kernel of that name in the build."""
    if launch.registers >= 0 and launch.shared_static >= 0:
        return launch.registers, launch.shared_static
    compiled = next((k for k in built.resources if k.name == launch.name), None)
    if compiled is None:
        return None
    _log.warning(
        "%s: %s; using ptxas's registers and shared memory", launch.name, launch.attribute_error
    )
    return compiled.registers, compiled.shared_bytes


def _failed(why: str) -> HarnessError:
    return HarnessError(
        kind="counters_failed",
        message=f"The in-process counters could not be matched to the launches: {why}.",
        fix="It is profiled through Nsight Compute (ncu) instead.",
    )
