"""The harness worker: `python -m kernelblaster.harness.worker` reads a WorkerRequest on stdin
and writes WorkerProgress lines, then one WorkerResponse (see harness/protocol/records.py).

Everything that can hang or crash — nvcc, the user's kernel, ncu — happens in this process or
its children, so the caller can kill it on timeout or cancellation and carry on."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from kernelblaster.folders import FolderError
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.cuda_source import read_source
from kernelblaster.harness.build.beside import build_beside
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.check import clean_baselines, cupti
from kernelblaster.harness.protocol.processes import exit_with_parent
from kernelblaster.harness.protocol.protocol_stream import ProtocolStream
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    PerfState,
    ProfileReport,
)
from kernelblaster.harness.protocol.setup_errors import (
    folder_error,
    internal_error,
    is_torch,
    module_missing,
    torch_missing,
)
from kernelblaster.harness.protocol.worker_protocol import (
    EXPECTED_REQUEST_ENV,
    GPU_FREE_FD_ENV,
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.target_build import BuildSpecError, build_kernelbench, build_spec
from kernelblaster.harness.target.targets import CALLED_KINDS, Target, detect_kind, resolve_target
from kernelblaster.harness.worker.reference_ahead import ReferenceAhead
from kernelblaster.settings import Settings

if TYPE_CHECKING:  # import torch: the worker imports it only past the build
    from kernelblaster.harness.check.integrity import RuntimeSnapshot
    from kernelblaster.harness.target.reference_side import ReferenceSide

_stream: ProtocolStream | None = None  # claimed in main()
_prewarming: threading.Thread | None = None  # a spare's _prewarm, started in main()
# A spare told its likely request: the reference side its prewarm makes for it
_ahead: ReferenceAhead | None = None
# Held while a thread imports what imports torch. Up to three threads import here at once (the
# prewarm, the reference side, the counters' warm-up), and torch's own circular imports, begun
# in two threads together, can hand one of them a partly initialized module.
_IMPORTS = threading.Lock()
# A spare's seconds from its start to its request's (set in main()); None: not a spare
_spare_age_s: float | None = None
# Set once the request is read: a spare still preparing stops doing what the request would
# otherwise wait for and can do beside its check itself (the counters' set-up)
_request_came = threading.Event()
# The clean reference process (harness/target/clean_reference.py): started before any candidate
# code runs here, at the worker's start (a spare's, beside its own torch import) or at the start
# of the request
_clean: CleanReference | None = None
_CLEAN_STARTING = threading.Lock()
_log = logging.getLogger(__name__)
# The phase of the last progress message, and whether the candidate's code may have run here: an
# exception escaping the request is the harness's own failure unless candidate code may be running
# in that phase.
_phase = "build"
_candidate_loaded = False
# Phases that run no candidate code in this process even once it is loaded: compute-sanitizer
# runs it in a process of its own, the baselines are timed in the clean reference process.
_HARNESS_ONLY_PHASES = frozenset({"sanitize", "baseline"})


def emit(message: WorkerProgress | WorkerResponse) -> None:
    global _phase
    assert _stream is not None
    if isinstance(message, WorkerProgress):
        _phase = message.phase
    _stream.emit(message)


def progress(phase, message: str, percent: int | None = None) -> None:
    emit(WorkerProgress(phase=phase, message=message, percent=percent))


def _materialize(request: WorkerRequest, settings: Settings) -> Path:
    """The file to build: the source itself, or `source_text` written beside the build cache
    (same suffix) when checking a candidate that isn't saved anywhere yet."""
    source = Path(request.source).resolve()
    if request.source_text is None:
        return source
    root = settings.cache_folder("candidates")
    digest = hashlib.sha256(request.source_text.encode("utf-8")).hexdigest()[:12]
    path = root / f"{source.stem}_{digest}{source.suffix}"
    path.write_text(request.source_text, encoding="utf-8")
    return path


def _target_for(
    request: WorkerRequest, settings: Settings
) -> tuple[Target | None, HarnessError | None]:
    """The target to run; or a build-only stand-in and the reason it can't be checked; or
    nothing and the reason it can't even be built."""
    source = Path(request.source).resolve()
    reference = Path(request.reference) if request.reference else None
    resolved = resolve_target(source, settings, reference=reference)
    built_from = _materialize(request, settings)
    if isinstance(resolved, Target):
        return msgspec.structs.replace(resolved, source=str(built_from)), None
    if resolved.kind == "bad_target":
        return None, resolved
    text = read_source(built_from)
    stand_in = Target(kind=detect_kind(source, text), source=str(built_from), entry="")
    return stand_in, resolved


def _build(target: Target, settings: Settings, unsaved_text: str | None = None) -> BuildResult:
    if target.kind == "kernelbench":
        return build_kernelbench(target, settings)
    try:
        spec = build_spec(target, settings)
    except BuildSpecError as exc:
        return BuildResult(
            ok=False, source=target.source, arch=settings.arch or "", error=exc.error
        )
    return build(msgspec.structs.replace(spec, source_text=unsaved_text), settings)


def _unbuildable_ahead(request: WorkerRequest, target: Target) -> HarnessError | None:
    """Why `unsaved_text` can't be built ahead of its save, or None."""
    if request.task != "build":
        return HarnessError(
            kind="bad_target",
            message=f"unsaved_text is built only (task 'build'), not {request.task!r}: what is "
            "verified and timed is the saved file",
            fix="Send the saved file's path without unsaved_text, or task 'build'.",
        )
    if request.source_text is not None:
        return HarnessError(
            kind="bad_target",
            message="a request gives either a candidate's source_text or the file's "
            "unsaved_text, not both",
            fix="Send one of them.",
        )
    if target.kind == "kernelbench":
        return HarnessError(
            kind="bad_target",
            message="a KernelBench solution is built by importing it (load_inline), which "
            "can't be done for text that is not saved",
            fix="Save the file: its build runs then.",
        )
    return None


def _build_and_prepare(
    target: Target, settings: Settings, *, prepares: bool
) -> tuple[BuildResult, ReferenceSide | None]:
    """The build, and the reference side of the check (harness/target/reference_side.py) made
    meanwhile (harness/build/beside.py) when it will be needed: a plain or extension target
    (a KernelBench solution's build runs its own code, in this process)."""
    if not prepares or target.kind not in ("plain", "extension"):
        if _ahead is not None:
            _ahead.unwanted()
        return _build(target, settings), None
    beside = build_beside(
        lambda: _build(target, settings),
        lambda abandon: _reference_side(target, settings, abandon),
        # the check's budget from here on, not the build's: a get_inputs() that hangs is
        # reported as such
        still_preparing=lambda: progress("verify", "preparing the reference's inputs"),
    )
    if beside.prepared is not None:
        beside.prepared.seconds["reference_after_build"] = round(beside.prepared_after_build_s, 4)
    return beside.built, beside.prepared


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is likely usable, asked without torch, so the clean reference process
    is started before this process's torch import only where it will be used. A wrong guess costs
    a process started in vain, or later."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return Path("/dev/nvidiactl").exists()


def clean_reference(gpu: int) -> CleanReference:
    """This worker's clean reference process on GPU `gpu`, started now if it was not."""
    global _clean
    with _CLEAN_STARTING:
        if _clean is not None and _clean.device != f"cuda:{gpu}":
            _clean.close()
            _clean = None
        if _clean is None:
            _clean = CleanReference(f"cuda:{gpu}", answers=clean_baselines.ANSWERS)
        return _clean


def _reference_side(
    target: Target, settings: Settings, abandon: Callable[[], bool]
) -> ReferenceSide | None:
    """The reference side, made here if torch and a GPU are present; else None, and the check
    reports what is missing after the build. Torch is imported here, beside nvcc; a spare's side
    made ahead is taken when it is this target's."""
    if _ahead is not None and (made := _ahead.take(target, settings)) is not None:
        return made
    # The clean process's session opened now, before this process's torch import (a fresh
    # worker's takes seconds): the child loads the reference and makes the trials' sets
    # meanwhile, instead of after it.
    opened = gpu_present()
    if opened:
        clean_reference(settings.gpu).open_for(target, settings)
    try:
        with _IMPORTS:
            from kernelblaster.harness.check import check
    except ModuleNotFoundError as exc:
        if not is_torch(exc):
            raise
        return None
    if check.gpu_problem(settings) is not None:
        return None
    clean = clean_reference(settings.gpu)
    return check.prepare_reference(
        target, settings, clean=clean, abandon=abandon, session_open=opened
    )


def _baselines(request: WorkerRequest) -> WorkerResponse:
    """Task "baselines": the reference's baselines alone (check.baselines_apart), torch.compile's
    compilation first, then the GPU's turn, which the caller gives by closing its end of the
    GPU_FREE_FD_ENV pipe (`_wait_for_the_gpu`)."""
    settings = request.settings
    if request.reference is None:
        return WorkerResponse(
            error=HarnessError(
                kind="bad_target",
                message="task 'baselines' names no reference",
                fix="Send the reference's path in the request's `reference`.",
            )
        )
    try:
        from kernelblaster.harness.check import check  # imports torch
    except ModuleNotFoundError as exc:
        if not is_torch(exc):
            raise
        return WorkerResponse(error=torch_missing())
    if (gpu_error := check.gpu_problem(settings)) is not None:
        return WorkerResponse(error=gpu_error)

    def turn() -> None:
        progress_message = "waiting for the GPU to time the baselines"
        emit(WorkerProgress(phase="baseline", message=progress_message, wants_gpu=True))
        _wait_for_the_gpu()

    result, error = check.baselines_apart(
        Path(request.reference),
        settings,
        progress=progress,
        clean=clean_reference(settings.gpu),
        turn=turn,
    )
    return WorkerResponse(check=result, error=error)


def handle(request: WorkerRequest) -> WorkerResponse:
    """The request run through its phases: build → check (verify, time) → profile (the
    in-process counters, ncu; each kernel classified) → respond (the baselines after the
    profile). A phase that ends the run answers it."""
    began = time.perf_counter()  # the request read: its phases below are timed from here
    if request.task == "baselines":
        return _baselines(request)
    target, target_error = _target_for(request, request.settings)
    if target is None:
        return WorkerResponse(error=target_error)
    if request.unsaved_text is not None:
        return _build_unsaved(request, target, target_error)
    run = _Run(request=request, target=target, target_error=target_error, began=began)
    if (answered := _build_phase(run)) is not None:
        return answered
    checked = _check_phase(run)
    if isinstance(checked, WorkerResponse):
        return checked
    report, states, error = _profile_phase(run, checked)
    return _respond(run, checked, report, states, error)


@dataclass
class _Run:
    """One request's run, and what each phase leaves for the next."""

    request: WorkerRequest
    target: Target
    target_error: HarnessError | None
    began: float
    integrity: RuntimeSnapshot | None = None  # a KernelBench solution's, before it first runs
    warming: Future[None] | None = None  # the in-process counters' warm-up
    built: BuildResult | None = None
    reference_side: ReferenceSide | None = None

    @property
    def settings(self) -> Settings:
        return self.request.settings


def _build_unsaved(
    request: WorkerRequest, target: Target, target_error: HarnessError | None
) -> WorkerResponse:
    """The file's unsaved text built ahead of its save, and nothing else."""
    if (refused := _unbuildable_ahead(request, target)) is not None:
        return WorkerResponse(error=refused)
    progress("build", f"building {Path(target.source).name} as edited, before its save")
    built = _build(target, request.settings, request.unsaved_text)
    return WorkerResponse(build=built, error=built.error or target_error)


def _build_phase(run: _Run) -> WorkerResponse | None:
    """The build, with what must precede the candidate's first code here and what runs beside
    nvcc (the reference side, the counters' warm-up, the native driver); the response when the
    run ends with it."""
    request, target, settings = run.request, run.target, run.settings
    if request.task != "build" and target.kind == "kernelbench":
        # before anything of the candidate runs here: a solution's build imports it (a plain or
        # extension target's library is loaded by its check, after the clean process started)
        clean_reference(settings.gpu)
    if target.kind == "kernelbench" and request.task != "build":
        # A solution's code first runs when its build imports it: whatever it patches from
        # then on must show against a snapshot taken before (imports torch, as the build does).
        with _IMPORTS:
            from kernelblaster.harness.check.integrity import RuntimeSnapshot

        run.integrity = RuntimeSnapshot()
        _loads_the_candidate()  # its build imports it
    if _counters_apply(request, target, settings):
        run.warming = _warm_counters_up(settings)
    if target.kind == "plain" and _drives_natively(request, settings):
        _build_driver_ahead(target, settings)
    progress("build", f"building {Path(target.source).name}")
    prepares = request.task != "build" and run.target_error is None
    built, run.reference_side = _build_and_prepare(target, settings, prepares=prepares)
    run.built = built
    if request.task == "build" or not built.ok:
        return WorkerResponse(build=built, error=built.error or run.target_error)
    if run.target_error is not None and not (
        target.kind == "standalone" and request.task == "profile"
    ):
        return WorkerResponse(build=built, error=run.target_error)
    return None


def _check_phase(run: _Run) -> CheckResult | WorkerResponse:
    """Verification and timing (harness/check/check.py), the worker's seconds to them in
    `phase_seconds`; the response when the run ends with them (task "check", a failure, a
    wrong result: a kernel that computes the wrong thing is neither timed nor profiled)."""
    request, target, settings, built = run.request, run.target, run.settings, run.built
    assert built is not None
    waited = time.perf_counter()
    if _prewarming is not None:
        _prewarming.join()  # its CUDA context and imports; nothing of it runs beside the timing
    prewarm_wait_s = time.perf_counter() - waited
    if _ahead is not None:
        _ahead.drop()  # a side made for another request (or none) holds no GPU memory now
    try:
        from kernelblaster.harness.check import check  # imports torch: only past the build
    except ModuleNotFoundError as exc:
        if not is_torch(exc):
            raise
        return WorkerResponse(build=built, error=torch_missing())
    gpu_error = check.gpu_problem(settings)
    if gpu_error is not None:
        return WorkerResponse(build=built, error=gpu_error)
    before_check_s = time.perf_counter() - run.began
    _loads_the_candidate()
    result, error = check.run_check(
        target,
        built,
        settings,
        clean=clean_reference(settings.gpu),
        progress=progress,
        sanitize=request.sanitize,
        integrity=run.integrity,
        reference_side=run.reference_side,
    )
    if _spare_age_s is not None:  # how ready the spare was when its request came
        result.phase_seconds.update(
            spare_age=round(_spare_age_s, 4), prewarm_wait=round(prewarm_wait_s, 4)
        )
    # The request read → the check begun (the build, or waiting for the build ahead, and the
    # reference side; prewarm_wait), and → the check's result sent: the rest of a save's
    # seconds to its timing are the server's and the pipes'.
    result.phase_seconds.update(
        worker_before_check=round(before_check_s, 4),
        worker_to_timing=round(time.perf_counter() - run.began, 4),
    )
    failed_verification = result.verify is not None and not result.verify.ok
    if request.task == "check" or error is not None or failed_verification:
        if error is None and not failed_verification and request.baselines:
            error = check.add_baselines(
                target, settings, result, progress=progress, clean=clean_reference(settings.gpu)
            )
        return WorkerResponse(build=built, check=result, error=error)
    return result


def _profile_phase(
    run: _Run, result: CheckResult
) -> tuple[ProfileReport | None, list[PerfState], HarnessError | None]:
    """The profile: the in-process counters' quick state first (sent as it lands), then ncu's
    pass where wanted; each kernel classified once, here where the profile is made."""
    request, target, settings, built = run.request, run.target, run.settings, run.built
    assert built is not None
    with _IMPORTS:
        from kernelblaster.harness.profile import profile

    # Shown while ncu runs: the verified timing is worth seconds to the user.
    emit(WorkerProgress(phase="profile", message="starting the profile", build=built, check=result))
    began = time.perf_counter()
    early = _early_profile(request, target, built, settings, result, run.warming)
    if early is not None:
        result.phase_seconds["profile_counters"] = round(time.perf_counter() - began, 4)
    skip_ncu = early is not None and not _ncu_wanted(request, result)
    # What follows (ncu's pass where wanted, the baselines) may be stopped for another file's save.
    message = "measuring the baselines" if skip_ncu else "profiling with ncu"
    emit(WorkerProgress(phase="profile", message=message, background=True))
    report: ProfileReport | None
    if skip_ncu and early is not None:
        report, states = early
        return report, states, None
    began = time.perf_counter()
    report, error = profile.profile_target(
        target,
        built,
        settings,
        depth=request.depth,
        kernels=request.kernels,
        progress=progress,
        arch=result.arch,
    )
    result.phase_seconds["profile_ncu"] = round(time.perf_counter() - began, 4)
    states = classify_report(report) if report is not None else []
    if report is None and early is not None:
        # ncu failed after the counters gave the state: keep it; `error` says what's missing.
        report, states = early
    return report, states, error


def _respond(
    run: _Run,
    checked: CheckResult,
    report: ProfileReport | None,
    states: list[PerfState],
    error: HarnessError | None,
) -> WorkerResponse:
    """The response, with the PyTorch baselines measured after the profile, so that neither
    the timing nor the state waits for torch.compile."""
    from kernelblaster.harness.check import check  # imported by the check phase already

    baseline_error = None
    if run.request.baselines:
        baseline_error = check.add_baselines(
            run.target,
            run.settings,
            checked,
            progress=progress,
            clean=clean_reference(run.settings.gpu),
        )
    return WorkerResponse(
        build=run.built,
        check=checked,
        profile=report,
        states=states,
        error=error or baseline_error,
    )


def _ncu_wanted(request: WorkerRequest, checked: CheckResult) -> bool:
    """Whether ncu's pass follows the in-process state (`ncu_below_ms`)."""
    if request.ncu_below_ms is None:
        return True
    return checked.timing is not None and checked.timing.median_ms < request.ncu_below_ms


def _counters_apply(request: WorkerRequest, target: Target, settings: Settings) -> bool:
    """Whether a verified kernel gets an early profile from the worker's own counters."""
    return (
        settings.in_process_counters
        and request.task == "profile"
        and request.depth == "quick"
        and target.kind in CALLED_KINDS
    )


def _warm_counters_up(settings: Settings) -> Future[None]:
    """harness/counters.warm_up in a daemon thread, beside the build and the check: the
    profile that follows them then skips it. A daemon, so that a worker whose build failed
    exits at once instead of waiting for it."""
    warmed: Future[None] = Future()

    def run() -> None:
        try:
            # The counter library compiled (on first use; seconds) or found in the build cache
            # first: torch-free, so beside the candidate's nvcc, not after the torch import.
            cupti.build_library(settings)
            if _prewarming is not None:
                _prewarming.join()  # a spare may be setting the counters up for this request
            with _IMPORTS:
                from kernelblaster.harness.profile.counters import warm_up  # imports torch

            warm_up(settings)
            warmed.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - handed to _early_profile, which logs it
            warmed.set_exception(exc)

    threading.Thread(target=run, name="counters warm-up", daemon=True).start()
    return warmed


def _drives_natively(request: WorkerRequest, settings: Settings) -> bool:
    """Whether the request runs a plain target through the native driver: ncu's pass, or
    compute-sanitizer's."""
    return (request.task == "profile" and settings.native_profile_driver) or (
        request.sanitize and settings.native_sanitizer_driver
    )


def _build_driver_ahead(target: Target, settings: Settings) -> None:
    """The native driver compiled in a daemon thread beside the build
    (driver_run.build_driver_ahead); its user waits for it there if it is not done."""

    def run() -> None:
        with _IMPORTS:
            from kernelblaster.harness.native.driver_run import build_driver_ahead  # torch

        build_driver_ahead(target, settings)

    threading.Thread(target=run, name="driver ahead", daemon=True).start()


def _early_profile(
    request: WorkerRequest,
    target: Target,
    built: BuildResult,
    settings: Settings,
    checked: CheckResult,
    warming: Future[None] | None,
) -> tuple[ProfileReport, list[PerfState]] | None:
    """A called target's quick profile from the worker's own counters (harness/profile/counters.py),
    sent ahead of ncu's pass, which adds the source lines and ncu's rules; None where that
    path does not apply or failed (said as progress: ncu's pass then gives the state)."""
    if warming is None:
        return None
    wait([warming])  # CUPTI's profiler is set up by one thread at a time
    if warming.exception() is not None:
        _log.info("warming the counters up failed; the profile meets it: %s", warming.exception())
    from kernelblaster.harness.profile.counters import profile_in_process

    report, error = profile_in_process(
        target, built, settings, kernels=request.kernels or None, progress=progress
    )
    if report is None:
        assert error is not None
        _log.warning("in-process counters failed, ncu only: %s\n%s", error.message, error.log)
        # Said, not only logged: the state now waits for ncu's seconds, and this is why.
        progress("profile", f"no in-process counters: {error.message} The state waits for ncu.")
        return None
    states = classify_report(report)
    emit(
        WorkerProgress(
            phase="profile",
            message="state from the in-process counters; ncu for the source lines",
            build=built,
            check=checked,
            profile=report,
            states=states,
        )
    )
    return report, states


def _prewarm(gpu_index: int, expected: WorkerRequest | None = None) -> None:
    """A spare worker (started before its request exists, see harness/protocol/worker_client.py)
    pays for the torch import and the CUDA context while it waits instead of on the next save, then
    prepares for the `expected` request. Without torch there is nothing to warm: the request
    itself reports it (`torch_missing`)."""
    try:
        if _warm(gpu_index) and expected is not None:
            _prepare_for(expected)
    finally:
        if _ahead is not None:
            _ahead.nothing_to_make()  # if it was not made: the request then makes its own


def import_past_build() -> bool:
    """The modules a worker imports past its build: torch, and the check's and the profile's
    (~0.2 s of imports on top of torch); False without torch. A spare's prewarm imports them,
    and the worker zygote before it forks any worker (harness/worker/zygote.py)."""
    try:
        with _IMPORTS:
            import torch  # noqa: F401

            from kernelblaster.harness.check import check  # noqa: F401
            from kernelblaster.harness.profile import counters, profile  # noqa: F401
    except ModuleNotFoundError as exc:
        if not is_torch(exc):
            raise
        return False
    return True


def _warm(gpu_index: int) -> bool:
    """The imports, the CUDA context, the GPU's arch and nvcc's version; False without torch."""
    if not import_past_build():
        return False
    import torch

    _mark("imported")

    # What every request would otherwise start with, each asked once per process: the GPU's
    # arch (nvidia-smi) and nvcc's version (the build cache's key), for the default nvcc.
    from kernelblaster.harness.build.cache import nvcc_version
    from kernelblaster.harness.build.gpu_arch import detect_arch

    detect_arch(Settings(gpu_index=gpu_index))
    nvcc = shutil.which(Settings().nvcc)
    try:
        if nvcc is not None:
            nvcc_version(nvcc)
    except (OSError, subprocess.SubprocessError):
        pass  # not remembered: the build asks again and reports what is wrong
    _mark("arch_known")
    usable = torch.cuda.is_available() and gpu_index < torch.cuda.device_count()
    if usable:  # where main() did not start it already; its context at its session
        clean_reference(gpu_index)
    _wait_for_the_gpu()
    _mark("gpu_free")
    if usable:
        torch.empty(1, device=torch.device("cuda", gpu_index))  # creates the context
        _mark("context")
    return True


def _mark(step: str) -> None:
    """A spare's step, for the side it makes ahead to report (ReferenceAhead.mark)."""
    if _ahead is not None:
        _ahead.mark(step)


def _wait_for_the_gpu() -> None:
    """A spare started while the worker before it still runs waits here, before its CUDA
    context, for that worker's exit or its own request (GPU_FREE_FD_ENV): its context, its
    reference side and its counters' set-up would otherwise run beside that worker's profile."""
    told = os.environ.get(GPU_FREE_FD_ENV, "")
    if not told.isdigit():
        return
    try:
        with os.fdopen(int(told), "rb") as pipe:
            pipe.read()  # nothing is ever written: its end of file is the signal
    except OSError as exc:  # not the pipe it should be: only the head start is at stake
        _log.warning("not waiting for the GPU: %s=%s is no pipe (%s)", GPU_FREE_FD_ENV, told, exc)


def _prepare_for(expected: WorkerRequest) -> None:
    """What the `expected` request's run would start with: its reference side, where its check
    would make one (a plain or extension target with a reference, on a usable GPU), the
    stream gate's calibration, then the in-process counters' set-up, where its profile would
    use them. None of them then runs beside the request's verification and timing."""
    from kernelblaster.harness.check import check

    assert _ahead is not None
    settings = expected.settings
    target, target_error = _target_for(expected, settings)
    if target is None or target_error is not None or check.gpu_problem(settings) is not None:
        return
    if target.kind in ("plain", "extension"):
        _ahead.make(target, settings, clean_reference(settings.gpu))
    if target.kind in CALLED_KINDS:  # its verification's stream gate
        import torch

        from kernelblaster.harness.check.stream_gate import calibrate

        calibrate(torch.device("cuda", settings.gpu))
    # The request already here (a spare taken young): its check joins this thread before
    # verifying, and its own warm-up thread sets the counters up beside the check, as in a
    # worker started for it; doing it here would hold up its timing.
    if _counters_apply(expected, target, settings) and not _request_came.is_set():
        from kernelblaster.harness.profile.counters import warm_up

        try:
            warm_up(settings)
        except (OSError, cupti.CuptiFailure) as exc:  # met again, and reported, by the profile
            _log.info("setting the counters up ahead of the request failed: %s", exc)


def _expected_request() -> WorkerRequest | None:
    """The request a spare was told to expect (EXPECTED_REQUEST_ENV), if any and readable."""
    told = os.environ.get(EXPECTED_REQUEST_ENV)
    if not told:
        return None
    try:
        return msgspec.json.decode(told, type=WorkerRequest)
    except msgspec.DecodeError as exc:  # ValidationError included: only a missed head start
        _log.warning("ignoring %s, not a worker request: %s", EXPECTED_REQUEST_ENV, exc)
        return None


def main() -> int:
    global _stream, _spare_age_s
    started = time.perf_counter()
    _stream = ProtocolStream()
    prewarm = os.environ.get("KERNELBLASTER_PREWARM", "")
    if prewarm.isdigit() and gpu_present():
        # First, so its start-up runs beside this process's; and before any thread starts here, so a
        # worker forked by the zygote can fork it too, torch already imported.
        clean_reference(int(prewarm))
    exit_with_parent()
    if prewarm.isdigit():
        # Beside reading the request, not before it: a request that comes while the spare is
        # still starting (the first save or open after the server started) has its nvcc build
        # run during the torch import instead of after it.
        global _prewarming, _ahead
        expected = _expected_request()
        _ahead = ReferenceAhead(started) if expected is not None else None
        _prewarming = threading.Thread(
            target=_prewarm, args=(int(prewarm), expected), name="prewarm", daemon=True
        )
        _prewarming.start()
    try:
        request = msgspec.json.decode(sys.stdin.buffer.read(), type=WorkerRequest)
    except msgspec.ValidationError as exc:
        emit(
            WorkerResponse(
                error=HarnessError(kind="bad_target", message=f"Malformed worker request: {exc}")
            )
        )
        return 2
    _request_came.set()
    if _prewarming is not None:
        _spare_age_s = time.perf_counter() - started
    emit(_answer(request))
    return 0


def _loads_the_candidate() -> None:
    global _candidate_loaded
    _candidate_loaded = True


def _answer(request: WorkerRequest) -> WorkerResponse:
    """`handle`'s response. A folder that can't be made, or an exception of the harness's own code
    where no candidate code runs, is the run's error with its fix, never a verdict on the kernel.
    One escaping where candidate code may run ends the worker, which its caller reports as a
    crash."""
    try:
        return handle(request)
    except FolderError as exc:
        return WorkerResponse(error=folder_error(exc))
    except ModuleNotFoundError as exc:  # our own import statements: an install problem
        _log.exception("a module is missing during %s", _phase)
        return WorkerResponse(error=module_missing(exc))
    except Exception as exc:
        if _candidate_loaded and _phase not in _HARNESS_ONLY_PHASES:
            raise
        _log.exception("the harness failed during %s", _phase)
        return WorkerResponse(error=internal_error(exc, phase=_phase))
