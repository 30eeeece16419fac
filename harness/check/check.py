"""build → verify → time (→ sanitize) for one target, in the worker. Imports torch."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelblaster.folders import FolderError
from kernelblaster.harness.analysis.cuda_source import kernel_names, read_source
from kernelblaster.harness.analysis.ptxas import kernel_base_names
from kernelblaster.harness.analysis.static_checks import check_cuda_source, check_python_solution
from kernelblaster.harness.check import clean_baselines, sanitizer, standalone
from kernelblaster.harness.check.baselines import Baselines, cached_baselines, device_name
from kernelblaster.harness.check.integrity import RuntimeSnapshot
from kernelblaster.harness.check.kernel_watch import KernelWatch
from kernelblaster.harness.check.timing import CudaClock, time_callable, timing_input_sets
from kernelblaster.harness.check.verify import Verifier
from kernelblaster.harness.protocol.cuda_errors import error_from_exception
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    VerifyWarning,
)
from kernelblaster.harness.protocol.setup_errors import (
    WITHOUT_A_GPU,
    folder_error,
    no_nvidia_driver,
    torch_cpu_only,
)
from kernelblaster.harness.target.candidate import Candidate, load_candidate
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.memory import (
    AHEAD_MAX_BYTES,
    model_bytes,
    out_of_memory,
    remember_problem_bytes,
    verification_room,
)
from kernelblaster.harness.target.reference import Reference, ReferenceError_
from kernelblaster.harness.target.reference_side import ReferenceSide, prepare_reference_side
from kernelblaster.harness.target.targets import Target
from kernelblaster.harness.target.trial_sets import fresh_seed, set_bytes
from kernelblaster.settings import Settings

Progress = Callable[..., None]
# Device faults met in this process, kept alive with the tensors their frames hold (see check).
_FAULTS: list[RuntimeError] = []


def gpu_problem(settings: Settings) -> HarnessError | None:
    """Why kernels can't run here, or None."""
    cpu_only = torch.version.cuda is None
    if (no_driver := no_nvidia_driver(torch.__version__ if cpu_only else None)) is not None:
        return no_driver
    if cpu_only:
        return torch_cpu_only(torch.__version__)
    if not torch.cuda.is_available():
        return HarnessError(
            kind="no_driver",
            message="CUDA is not available: the NVIDIA driver did not initialise.",
            fix="Check that `nvidia-smi` works and that its driver supports this PyTorch's "
            f"CUDA {torch.version.cuda}. {WITHOUT_A_GPU}",
        )
    if settings.gpu >= torch.cuda.device_count():
        return HarnessError(
            kind="no_gpu",
            message=f"GPU index {settings.gpu} doesn't exist "
            f"({torch.cuda.device_count()} GPU(s) visible).",
            fix="Set gpuIndex to a visible GPU.",
        )
    return None


def _device_arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _static_findings(target: Target, settings: Settings) -> list[VerifyWarning]:
    text = read_source(Path(target.source))
    allow = target.allow_library_calls or settings.allow_library_calls
    if target.kind == "kernelbench":
        reference_module = Path(target.reference).stem if target.reference else None
        return check_python_solution(
            text, reference_module=reference_module, allow_library_calls=allow
        )
    return check_cuda_source(text, allow_library_calls=allow)


def _check_standalone(
    target: Target, built: BuildResult, settings: Settings, result: CheckResult
) -> HarnessError | None:
    executable = Path(built.artifact or "")
    cwd = Path(target.source).parent
    outcome = standalone.run_program(
        executable, target.args, timeout_s=settings.run_timeout_s, cwd=cwd
    )
    if isinstance(outcome, HarnessError):
        return outcome
    if target.golden:
        golden = Path(target.golden).read_text(encoding="utf-8")
        result.verify = standalone.compare_output(
            outcome[0], golden, atol=target.atol or 1e-5, rtol=target.rtol or 1e-4
        )
    result.timing = standalone.time_program(
        executable, target.args, timeout_s=settings.run_timeout_s, cwd=cwd
    )
    return None


def run_check(
    target: Target,
    built: BuildResult,
    settings: Settings,
    *,
    progress: Progress,
    clean: CleanReference,
    sanitize: bool = False,
    integrity: RuntimeSnapshot | None = None,
    reference_side: ReferenceSide | None = None,
) -> tuple[CheckResult, HarnessError | None]:
    """The check's result, and why it stopped short (None: it ran to the end; a failed verification
    is a result, not an error). `clean`: the clean reference process, started before any
    candidate code ran. `integrity`: the runtime before the candidate's code first ran, when that
    was before this call; else taken here. `reference_side`: made while the candidate was built;
    else made here."""
    device = torch.device("cuda", settings.gpu)
    torch.cuda.set_device(device)
    result = CheckResult(
        source=target.source,
        target_kind=target.kind,
        gpu=torch.cuda.get_device_name(device),
        arch=_device_arch(device),
    )
    phase_began = time.perf_counter()

    def phase_done(name: str) -> None:
        nonlocal phase_began
        now = time.perf_counter()
        result.phase_seconds[name] = round(now - phase_began, 4)
        phase_began = now

    if target.kind == "standalone":
        progress("verify", "running the program")
        error = _check_standalone(target, built, settings, result)
        phase_done("run")
    else:
        kernels = set(kernel_names(Path(target.source)))
        try:
            error = _check_callable(
                target,
                built,
                settings,
                result,
                device,
                progress,
                phase_done,
                integrity,
                reference_side or clean,
            )
        except ReferenceError_ as exc:
            error = exc.error
        except RuntimeError as exc:
            error = error_from_exception(exc, kernels=kernels)
            if error.kind == "illegal_memory_access":
                # CUDA's error is sticky now, and c10 aborts the process when a tensor the
                # traceback's frames hold is freed: they are kept until this one-request
                # worker exits, so that its answer is sent first.
                _FAULTS.append(exc)
        if error is not None:
            return result, error
    # A failed verification is sanitized too: a wrong answer may come from an out-of-bounds
    # write (into a neighbouring tensor: an input "modified", an output wrong), which memcheck
    # names with its line.
    if sanitize and error is None:
        findings, result.sanitizer, error = sanitizer.sanitize_target(
            target, built, settings, progress
        )
        phase_done("sanitize")
        if findings and result.verify is not None:
            messages = [f.message for f in findings[:3]]
            if not result.verify.ok:
                messages.append(result.verify.message)  # what verification saw of it
            result.verify.hacks.extend(findings)
            result.verify.ok = False
            result.verify.message = "; ".join(messages)
    return result, error


def prepare_reference(
    target: Target,
    settings: Settings,
    *,
    clean: CleanReference,
    abandon: Callable[[], bool] = lambda: False,
    session_open: bool = False,
) -> ReferenceSide:
    """The reference side of `target`'s check, on the check's GPU: the session opened in the clean
    reference process (`session_open`: the caller opened it already) and, here, the reference the
    candidate is loaded against and its probe."""
    device = torch.device("cuda", settings.gpu)
    path = Path(target.reference or "")
    if not session_open:
        clean.open_for(target, settings)
    side = prepare_reference_side(path, device, trials=settings.trials, abandon=abandon, sets=False)
    side.clean = clean
    if side.failure is None and side.reference is not None and side.probe is not None:
        # for the spares that will make this reference's side ahead (spare_side_fits)
        sized = (
            set_bytes(side.probe.inputs),
            set_bytes(side.probe.output_templates),
            model_bytes(side.reference.model),
        )
        remember_problem_bytes(path, settings.cache_root(), sized)
    return side


def _check_callable(
    target, built, settings, result, device, progress, phase_done, integrity, side_or_clean
) -> HarnessError | None:
    """Load, verify and time into `result`; the error that stopped it, if any. "load" is the
    time until the candidate is loaded: the reference side's too when it is made here."""
    reference: Reference | None = None
    candidate: Candidate | None = None
    try:
        if isinstance(side_or_clean, CleanReference):
            progress("verify", "loading the reference")
            side = prepare_reference(target, settings, clean=side_or_clean)
        else:
            side = side_or_clean
            progress("verify", f"loading {Path(target.source).name}")
        result.phase_seconds.update(side.seconds)
        reference = side.reference
        reference, probe = side.ready_without_sets()
        assert side.clean is not None
        began = time.perf_counter()
        facts = side.clean.facts()  # the clean process's session: its sets, its habits
        result.phase_seconds["clean_reference_wait"] = round(time.perf_counter() - began, 4)
        # the session's parts, made before the request came where the side was (a spare's)
        made = "ahead_clean" if side.ahead else "clean"
        result.phase_seconds.update({f"{made}_{k}": v for k, v in facts.seconds.items()})
        began = time.perf_counter()
        side.clean.hand_over_ahead()  # a spare's already were: nothing to do then
        result.phase_seconds["clean_reference_handed_over"] = round(time.perf_counter() - began, 4)
        input_bytes, output_bytes = set_bytes(probe.inputs), set_bytes(probe.output_templates)
        refused = verification_room(
            input_bytes, output_bytes, held=input_bytes + facts.ahead_bytes, device=device
        )
        if refused is not None:
            return refused
        artifact = Path(built.artifact) if built.artifact else None
        if target.kind == "kernelbench":
            # Importing the solution runs load_inline, a compilation: it gets the build budget.
            progress("build", f"importing {Path(target.source).name} (load_inline compiles it)")
        integrity = integrity or RuntimeSnapshot()  # before the candidate's code first runs
        candidate = load_candidate(target, artifact, reference, device, probe)
        # What the build compiled is the candidate's own too, kernels its source search cannot
        # name included: the kernel watch must not call a macro-made kernel a library's.
        candidate.own_kernels |= kernel_base_names(built.resources)
        probe.inputs = []  # one input set less held while verifying
        if input_bytes + output_bytes > AHEAD_MAX_BYTES:
            # The probe's sets, cached by the allocator, go back to the device: blocks of their
            # sizes would sit unused through verification (8.6 GB for KernelBench's
            # 47_Sum_reduction, issue 32).
            torch.cuda.empty_cache()
        phase_done("load")
        began = time.perf_counter()
        warnings = _static_findings(target, settings)
        verifier = Verifier(
            candidate,
            reference,
            device=device,
            integrity=integrity,
            oracle=side.clean,
            facts=facts,
            atol=target.atol,
            rtol=target.rtol,
            watch_kernels=any(w.kind == "calls_library" for w in warnings),
            allow_library_calls=target.allow_library_calls or settings.allow_library_calls,
            kernel_watch=KernelWatch(settings),
        )
        verifier.on_step = lambda step: progress("verify", step)
        # of "verify": the source's static checks and the verifier's set-up (the kernel watch)
        result.phase_seconds["verify_setup"] = round(time.perf_counter() - began, 4)
        _verify_and_time(settings, result, progress, phase_done, verifier, warnings)
        side.clean.end_session()  # its memory back before the baselines and the profile
        return None
    except torch.OutOfMemoryError as exc:
        return out_of_memory(
            exc,
            phase=_phase(result),
            reference=reference,
            output_templates=candidate.output_templates if candidate else [],
            device=device,
        )


def _phase(result: CheckResult) -> str:
    """What the check was doing, from the phases it has finished."""
    done = result.phase_seconds
    if "load" not in done:
        return "loading the reference and the candidate"
    if "verify" not in done:
        return "verifying"
    if "time" not in done:
        return "timing the kernel"
    return "timing PyTorch eager and torch.compile"


def _verify_and_time(settings, result, progress, phase_done, verifier, warnings) -> None:
    """Verify, time and verify once more into `result`. Besides "verify" and "time" (timing
    and the trial after it), their parts: verify_gate, verify_calls, verify_checks,
    verify_reference_here (`Verifier.seconds`), time_repetitions, time_recheck."""
    candidate, reference, device = verifier.candidate, verifier.reference, verifier.device
    progress("verify", f"verifying on {verifier.facts.trials} fresh input sets")
    outcome = verifier.verify()
    outcome.warnings = warnings + outcome.warnings
    result.verify = outcome
    result.phase_seconds.update({f"verify_{k}": round(v, 4) for k, v in verifier.seconds.items()})
    phase_done("verify")
    if not outcome.ok:
        return
    progress("time", "timing the kernel")
    began = time.perf_counter()
    verifier.oracle.trim()  # the clean process holds nothing while the kernel is timed
    result.phase_seconds["time_trim"] = round(time.perf_counter() - began, 4)
    candidate.poison = False
    input_sets = timing_input_sets(reference, outcome.seeds, device)
    large = set_bytes(input_sets[0]) > AHEAD_MAX_BYTES
    clock = CudaClock(device)
    result.timing = time_callable(candidate, input_sets, clock=clock)
    candidate.poison = True
    del input_sets, clock
    if large:  # the timing's set back to the device before the clean process's next one
        torch.cuda.empty_cache()
    result.phase_seconds["time_repetitions"] = round(time.perf_counter() - began, 4)
    progress("time", "verifying once more after timing")
    began = time.perf_counter()
    recheck = verifier.recheck()
    result.phase_seconds["time_recheck"] = round(time.perf_counter() - began, 4)
    recheck.warnings = outcome.warnings
    result.verify = recheck
    if not recheck.ok:
        result.timing = None  # what was timed isn't what was verified
        return
    phase_done("time")
    # Only baselines measured before: measuring them (torch.compile, seconds) would hold up the
    # first verified timing. The worker adds them later (`add_baselines`) when missing.
    cached = cached_baselines(reference.path, device, settings.cache_root())
    if cached is not None:
        _apply_baselines(result, cached)


def _apply_baselines(result: CheckResult, baselines: Baselines) -> None:
    assert result.timing is not None
    result.eager = baselines.eager
    result.compiled = baselines.compiled
    result.phase_seconds.update(baselines.seconds)  # none when read from the cache
    result.speedup_vs_eager = baselines.eager.median_ms / result.timing.median_ms
    if baselines.compiled is not None:
        result.speedup_vs_compile = baselines.compiled.median_ms / result.timing.median_ms


def add_baselines(
    target: Target,
    settings: Settings,
    result: CheckResult,
    *,
    progress: Progress,
    clean: CleanReference,
) -> HarnessError | None:
    """PyTorch eager and torch.compile timed on the reference (cached per reference and GPU), and
    the kernel's speedups over them, into `result`; the error that stopped it, if any. Timed in
    `clean`: the candidate loaded here may have slowed the reference's operators, inflating its
    speedups."""
    if result.timing is None or result.eager is not None or target.kind == "standalone":
        return None
    assert result.verify is not None
    progress("baseline", "timing PyTorch eager and torch.compile (cached per reference)")
    began = time.perf_counter()
    # The blocks this process's allocator keeps from the check back to the device: the clean
    # process makes the baselines' input sets and outputs beside it (a large problem's are GBs).
    torch.cuda.empty_cache()
    try:
        measured = clean.ask(
            clean_baselines.QUESTION,
            Path(target.reference or ""),
            result.verify.seeds,
            str(settings.cache_root()),
        )
        _apply_baselines(result, measured)
    except (ReferenceError_, RuntimeError, FolderError) as exc:  # OutOfMemoryError: Runtime
        return _baselines_error(exc, clean, phase=_phase(result))
    result.phase_seconds["baselines"] = round(time.perf_counter() - began, 4)
    return None


def _baselines_error(exc: Exception, clean: CleanReference, *, phase: str) -> HarnessError:
    """What stopped the baselines in `clean`, as a check reports it."""
    if isinstance(exc, ReferenceError_):
        return exc.error
    if isinstance(exc, FolderError):  # the baselines' cache folder
        return folder_error(exc)
    if isinstance(exc, torch.OutOfMemoryError):
        return out_of_memory(
            exc, phase=phase, reference=None, output_templates=[], device=torch.device(clean.device)
        )
    return error_from_exception(exc, kernels=set())


def baselines_apart(
    reference: Path,
    settings: Settings,
    *,
    progress: Progress,
    clean: CleanReference,
    turn: Callable[[], None],
) -> tuple[CheckResult, HarnessError | None]:
    """The baselines of `reference` alone (task "baselines"), in `clean`: torch.compile's
    compilation first, launching nothing; then `turn()`, which returns when the GPU is this
    run's; then the measurement. The result carries them as a check does, with where their
    seconds went."""
    result = CheckResult(source=str(reference), target_kind="reference")
    cache_dir = str(settings.cache_root())
    seeds = [fresh_seed() for _ in range(3)]  # the timing's input sets, as a check draws them
    try:
        progress("baseline", "compiling torch.compile's code while the GPU does other work")
        began = time.perf_counter()
        compiled = clean.ask(clean_baselines.COMPILE_AHEAD, reference, seeds[0], cache_dir)
        result.phase_seconds["baselines_compile_ahead"] = round(time.perf_counter() - began, 4)
        if compiled not in ("cached", "compiled"):
            progress("baseline", compiled)
        began = time.perf_counter()
        turn()
        result.phase_seconds["baselines_gpu_wait"] = round(time.perf_counter() - began, 4)
        progress("baseline", "timing PyTorch eager and torch.compile")  # budgeted again
        began = time.perf_counter()
        measured = clean.ask(clean_baselines.QUESTION, reference, seeds, cache_dir)
    except (ReferenceError_, RuntimeError, FolderError) as exc:  # OutOfMemoryError: Runtime
        phase = "timing PyTorch eager and torch.compile"
        return result, _baselines_error(exc, clean, phase=phase)
    result.gpu = device_name(torch.device(clean.device))
    result.eager, result.compiled = measured.eager, measured.compiled
    result.phase_seconds.update(measured.seconds)
    result.phase_seconds["baselines"] = round(time.perf_counter() - began, 4)
    return result, None
