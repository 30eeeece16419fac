"""build → verify → time (→ sanitize) for one target, in the worker. Imports torch."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelblaster.harness import sanitizer, standalone
from kernelblaster.harness.baselines import measure_baselines
from kernelblaster.harness.candidate import load_candidate
from kernelblaster.harness.cuda_errors import error_from_exception
from kernelblaster.harness.cuda_source import kernel_names, read_source
from kernelblaster.harness.records import BuildResult, CheckResult, HackFinding, HarnessError
from kernelblaster.harness.reference import ReferenceError_, load_reference
from kernelblaster.harness.run_once import RunOnceSpec, program, write_spec
from kernelblaster.harness.setup_errors import torch_cpu_only
from kernelblaster.harness.static_checks import check_cuda_source, check_python_solution
from kernelblaster.harness.targets import Target
from kernelblaster.harness.timing import escaped_work_ms, time_callable
from kernelblaster.harness.verify import verify
from kernelblaster.settings import Settings

Progress = Callable[..., None]

# Work still running this long after the timed stream finished means it escaped the timing.
_ESCAPED_MS_FLOOR = 0.05


def gpu_problem(settings: Settings) -> HarnessError | None:
    """Why kernels can't run here, or None."""
    if torch.version.cuda is None:
        return torch_cpu_only(torch.__version__)
    if not torch.cuda.is_available():
        has_device_nodes = Path("/dev/nvidiactl").exists()
        return HarnessError(
            kind="no_driver" if has_device_nodes else "no_gpu",
            message="CUDA is not available: "
            + ("the NVIDIA driver did not initialise." if has_device_nodes else "no NVIDIA GPU."),
            fix="Run on a machine with an NVIDIA GPU and driver (`nvidia-smi` must work). "
            "Build diagnostics and resource usage still work without one.",
        )
    if settings.gpu_index >= torch.cuda.device_count():
        return HarnessError(
            kind="no_gpu",
            message=f"GPU index {settings.gpu_index} doesn't exist "
            f"({torch.cuda.device_count()} GPU(s) visible).",
            fix="Set gpuIndex to a visible GPU.",
        )
    return None


def _device_arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _static_findings(target: Target, settings: Settings) -> list[HackFinding]:
    text = read_source(Path(target.source))
    allow = target.allow_library_calls or settings.allow_library_calls
    if target.kind == "kernelbench":
        reference_module = Path(target.reference).stem if target.reference else None
        return check_python_solution(
            text, reference_module=reference_module, allow_library_calls=allow
        )
    return check_cuda_source(text, allow_library_calls=allow)


def _sanitize(
    target: Target, built: BuildResult, settings: Settings, work_dir: Path
) -> tuple[list[HackFinding], HarnessError | None]:
    if target.kind == "standalone":
        run = [str(built.artifact), *target.args]
    else:
        spec = RunOnceSpec(target=target, artifact=built.artifact, gpu_index=settings.gpu_index)
        run = program(write_spec(spec, work_dir))
    text = read_source(Path(target.source))
    tools = ["memcheck"] + (["racecheck"] if "__shared__" in text else [])
    findings: list[HackFinding] = []
    for tool in tools:
        found, error = sanitizer.sanitize(run, tool=tool, source=target.source, settings=settings)
        if error is not None:
            return findings, error
        findings.extend(found)
    return findings, None


def _check_standalone(
    target: Target, built: BuildResult, settings: Settings, result: CheckResult
) -> CheckResult:
    executable = Path(built.artifact or "")
    cwd = Path(target.source).parent
    outcome = standalone.run_program(
        executable, target.args, timeout_s=settings.run_timeout_s, cwd=cwd
    )
    if isinstance(outcome, HarnessError):
        result.error = outcome
        return result
    if target.golden:
        golden = Path(target.golden).read_text(encoding="utf-8")
        result.verify = standalone.compare_output(
            outcome[0], golden, atol=target.atol or 1e-5, rtol=target.rtol or 1e-4
        )
    result.timing = standalone.time_program(
        executable, target.args, timeout_s=settings.run_timeout_s, cwd=cwd
    )
    return result


def run_check(
    target: Target,
    built: BuildResult,
    settings: Settings,
    *,
    progress: Progress,
    sanitize: bool = False,
) -> CheckResult:
    device = torch.device("cuda", settings.gpu_index)
    torch.cuda.set_device(device)
    result = CheckResult(
        source=target.source,
        target_kind=target.kind,
        gpu=torch.cuda.get_device_name(device),
        arch=_device_arch(device),
        build=built,
    )
    phase_began = time.perf_counter()

    def phase_done(name: str) -> None:
        nonlocal phase_began
        now = time.perf_counter()
        result.phase_seconds[name] = round(now - phase_began, 4)
        phase_began = now

    work_dir = settings.cache_root() / "work"
    if target.kind == "standalone":
        progress("verify", "running the program")
        _check_standalone(target, built, settings, result)
        phase_done("run")
    else:
        kernels = set(kernel_names(Path(target.source)))
        try:
            result = _check_callable(target, built, settings, result, device, progress, phase_done)
        except ReferenceError_ as exc:
            result.error = exc.error
        except RuntimeError as exc:
            result.error = error_from_exception(exc, kernels=kernels)
        if result.error is not None or not (result.verify and result.verify.ok):
            return result
    if sanitize and result.error is None:
        progress("sanitize", "compute-sanitizer memcheck")
        findings, error = _sanitize(target, built, settings, work_dir)
        phase_done("sanitize")
        result.error = result.error or error
        if findings and result.verify is not None:
            result.verify.hacks.extend(findings)
            result.verify.ok = False
            result.verify.message = "; ".join(f.message for f in findings[:3])
    return result


def _check_callable(target, built, settings, result, device, progress, phase_done) -> CheckResult:
    progress("verify", "loading the reference")
    reference = load_reference(Path(target.reference or ""), device)
    artifact = Path(built.artifact) if built.artifact else None
    if target.kind == "kernelbench":
        # Importing the solution runs load_inline, a compilation: it gets the build budget.
        progress("build", f"importing {Path(target.source).name} (load_inline compiles it)")
    candidate = load_candidate(target, artifact, reference, device)
    phase_done("load")
    progress("verify", f"verifying on {max(settings.trials, 3)} fresh input sets")
    outcome = verify(
        candidate,
        reference,
        device=device,
        trials=settings.trials,
        atol=target.atol,
        rtol=target.rtol,
        allow_library_calls=target.allow_library_calls or settings.allow_library_calls,
    )
    static = _static_findings(target, settings)
    if static:
        outcome.hacks.extend(static)
        outcome.ok = False
        outcome.message = "; ".join(f.message for f in outcome.hacks[:3])
    result.verify = outcome
    phase_done("verify")
    if not outcome.ok:
        return result
    progress("time", "timing the kernel")
    candidate.poison = False
    input_sets = [reference.inputs(seed, device) for seed in outcome.seeds[:3]]
    result.timing = time_callable(candidate, input_sets, device=device)
    escaped = escaped_work_ms(candidate, input_sets[0], device)
    if escaped > max(_ESCAPED_MS_FLOOR, 0.2 * result.timing.median_ms):
        outcome.hacks.append(
            HackFinding(
                kind="side_stream",
                message=f"the GPU stays busy {escaped:.3f} ms after the timed stream finished: "
                "work escapes the measured region",
            )
        )
        outcome.ok = False
        outcome.message = outcome.hacks[-1].message
        result.timing = None
        return result
    phase_done("time")
    progress("baseline", "timing PyTorch eager and torch.compile (cached per reference)")
    baselines = measure_baselines(reference, input_sets, device, settings.cache_root())
    result.eager = baselines.eager
    result.compiled = baselines.compiled
    result.speedup_vs_eager = baselines.eager.median_ms / result.timing.median_ms
    if baselines.compiled is not None:
        result.speedup_vs_compile = baselines.compiled.median_ms / result.timing.median_ms
    phase_done("baselines")
    return result
