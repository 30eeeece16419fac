"""A KernelBench run: per problem, a first kernel (from `init`, or given), the optimization loop
with one KB for the whole run, then the best kernel's final timing against the faster of eager
and torch.compile. Each problem works in its own folder, so the user's checkout is never written.
The results file is rewritten atomically after each problem, so a rerun skips finished ones; a
failure of the machine stops the run without recording the problem at hand."""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from kernelblaster.agents.kernelbench.baselines import BaselinesJob
from kernelblaster.agents.kernelbench.metrics import summarize
from kernelblaster.agents.kernelbench.problems import Problem
from kernelblaster.agents.kernelbench.records import (
    Baseline,
    KernelBenchRun,
    ProblemResult,
    RunConfig,
    Status,
)
from kernelblaster.agents.llm.client import LlmClient, Usage
from kernelblaster.agents.loop.evaluation import Evaluation, evaluate
from kernelblaster.agents.loop.gpu_gates import GatedEvaluate, GpuGates
from kernelblaster.agents.loop.init_kernel import initial_kernel
from kernelblaster.agents.loop.rollout_runners import runner_for
from kernelblaster.agents.loop.run import OptimizeRun, optimized_copy_path, run_optimization
from kernelblaster.atomic_files import save_file, write_atomically
from kernelblaster.folders import made_folder
from kernelblaster.harness.analysis.cuda_source import global_kernels
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.harness.protocol.records import MACHINE_ERROR_KINDS, CheckResult
from kernelblaster.harness.target.pairing import kernel_beside
from kernelblaster.harness.target.reference_signature import SignatureResponse, measure_signature
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

# LLM errors that say the endpoint won't answer any problem (like the harness's
# MACHINE_ERROR_KINDS for the machine): the run stops instead of failing every problem alike.
ENDPOINT_ERRORS = frozenset({"unreachable", "auth", "model_not_found", "not_configured"})

Evaluate = Callable[..., Evaluation]
# (reference, kernel source, settings, the problem's GPU gates) → a job measuring the baselines
StartBaselines = Callable[[Path, Path, Settings, GpuGates], BaselinesJob]


class RunAborted(Exception):
    """Every further problem would fail the same way; the message says why and how to fix it."""


@dataclass(frozen=True)
class RunServices:
    settings: Settings
    client: LlmClient
    kb: KnowledgeBase
    work_dir: Path
    evaluate_fn: Evaluate = evaluate
    signature_fn: Callable[..., SignatureResponse] = measure_signature
    seed: int | None = None
    # The baselines measured apart from the checks, from each problem's start, timed on their
    # GPU turn (agents/kernelbench/baselines.py); None: each check measures them where none are
    # cached (a scripted evaluate_fn's checks carry its own)
    baselines_fn: StartBaselines | None = BaselinesJob


class ResultsMismatch(ValueError):
    """The results file to continue was made with other options."""


def open_run(
    path: Path, *, device: str, level: str, config: RunConfig, note: str, restart: bool
) -> KernelBenchRun:
    """The run to continue from `path`, or a new one (with `restart`, or when there is none).
    Continuing with other options would mix two experiments in one file: refused."""
    if path.is_file() and not restart:
        run = msgspec.json.decode(path.read_bytes(), type=KernelBenchRun)
        if run.config != config:
            raise ResultsMismatch(
                f"{path} was made with {run.config}; rerun with the same options to continue "
                "it, or pass --restart to start over"
            )
        return run
    return KernelBenchRun(device=device, level=level, config=config, note=note)


def save_run(path: Path, run: KernelBenchRun) -> None:
    made_folder(path.parent, fix="Pass --results a folder you can write")
    text = msgspec.json.format(msgspec.json.encode(run).decode(), indent=2)
    write_atomically(path, text + "\n")


def run_kernelbench(
    problems: list[Problem],
    run: KernelBenchRun,
    *,
    results_path: Path,
    services: RunServices,
    on_line: Callable[[str], None] = print,
) -> KernelBenchRun:
    """Solve each problem `run` doesn't hold yet, saving `run` after each."""
    finished = {result.problem: result for result in run.problems}
    for number, problem in enumerate(problems, start=1):
        prefix = f"[{number}/{len(problems)}] {run.level}/{problem.name}"
        if problem.name in finished:
            on_line(f"{prefix}: finished in an earlier run ({finished[problem.name].status})")
            continue
        on_line(f"{prefix}: {'checking the given kernel' if problem.start else 'init'}...")
        result, usage = solve_problem(problem, run, services)
        run.problems.append(result)
        run.summary = summarize(run.problems)
        run.estimated_tokens = run.estimated_tokens or usage.estimated
        save_run(results_path, run)
        on_line(f"{prefix}: {progress_text(result)}")
    return run


def progress_text(result: ProblemResult) -> str:
    tokens = f"{(result.prompt_tokens + result.completion_tokens) / 1000:.1f}k tokens"
    cost = f"{tokens}, {result.wall_s:.0f} s"
    if result.status != "verified":
        return f"{result.status}: {result.detail[:200]} ({cost})"
    assert result.speedup is not None
    gained = (
        f", optimize {result.optimize_speedup:.2f}x via {' → '.join(result.techniques)}"
        if result.techniques and result.optimize_speedup
        else ", optimize found nothing faster"
    )
    notes = [result.sanitizer.summary] if result.sanitizer else []
    notes += [passed.summary for passed in result.passed_over]
    return (
        f"verified, {result.speedup:.2f}x vs {result.baseline} (first kernel "
        f"{result.initial_speedup or 0:.2f}x{gained}; {cost})"
        + "".join(f"; {note}" for note in notes)
    )


def solve_problem(
    problem: Problem, run: KernelBenchRun, services: RunServices
) -> tuple[ProblemResult, Usage]:
    """The problem's result, and the tokens of every LLM call made for it (whatever the
    outcome: counted from the client's log, not from what each stage reports)."""
    client = services.client
    logged = len(client.usage_log)
    started = time.monotonic()
    result = ProblemResult(problem=problem.name, file=str(problem.path), status="init_failed")
    try:
        _solve(problem, run, services, result)
    finally:
        calls = client.usage_log[logged:]
        usage = sum((u for _, u in calls), Usage())
        result.prompt_tokens = usage.prompt_tokens
        result.completion_tokens = usage.completion_tokens
        by_purpose: dict[str, int] = {}
        for purpose, u in calls:
            by_purpose[purpose] = by_purpose.get(purpose, 0) + u.total_tokens
        result.tokens_by_purpose = by_purpose
        result.wall_s = round(time.monotonic() - started, 3)
    return result, usage


def _solve(
    problem: Problem, run: KernelBenchRun, services: RunServices, result: ProblemResult
) -> None:
    settings = services.settings
    folder = services.work_dir / problem.name
    if folder.exists():  # a problem cut short in an earlier run starts over
        shutil.rmtree(folder)
    made_folder(folder, fix="Pass --work a folder you can write")
    reference = folder / problem.path.name
    shutil.copyfile(problem.path, reference)
    source = kernel_beside(reference)
    # Every use of the GPU for this problem takes its turn at these gates: the checks, the
    # loop's evaluations and the baselines' timing, which is measured apart from the start.
    gates = GpuGates(slots=settings.parallel_gpu_jobs)
    job = None
    if services.baselines_fn is not None:
        job = services.baselines_fn(reference, source, settings, gates)
    checks = services.evaluate_fn
    if job is not None:  # none of the checks measures them meanwhile
        checks = functools.partial(checks, baselines=False)
    try:
        _optimize(problem, run, services, result, source, reference, checks, gates)
    finally:
        if job is not None:
            _join_baselines(result, job)


def _optimize(
    problem: Problem,
    run: KernelBenchRun,
    services: RunServices,
    result: ProblemResult,
    source: Path,
    reference: Path,
    checks: Evaluate,
    gates: GpuGates,
) -> None:
    settings = services.settings
    evaluate_fn = GatedEvaluate(checks, gates=gates)  # the runner's own checks

    if problem.start is not None:
        result.started_from = "given"
        text = problem.start.read_text(encoding="utf-8")
        save_file(source, text, force=True)
        # Profiled in full, as the loop's first step needs it: the loop starts from this
        # evaluation instead of making its own (a profiler that fails leaves that to the loop).
        began = time.monotonic()
        first = evaluate_fn(source, text, _first_kernel(text), settings, depth="full")
        result.first_phases = msgspec.structs.replace(
            first.phases, evaluation=round(time.monotonic() - began, 4)
        )
        if not (first.verified or _checked(first)):
            _fail(result, first)
            return
        origin = first if first.verified else None
        check = first.check
    else:
        init = initial_kernel(
            reference,
            settings=settings,
            client=services.client,
            attempts=run.config.init_attempts,
            evaluate_fn=evaluate_fn,
            signature=services.signature_fn(reference, timeout_s=settings.run_timeout_s),
        )
        result.init_replies = init.attempts
        if init.source is None:
            _stop(
                result,
                init.error or "",
                kind=init.error_kind,
                status="init_failed",
                llm_error=init.llm_error,
            )
            return
        text = init.source
        save_file(source, text, force=True)
        check, origin = init.check, None
    assert check is not None and check.timing is not None
    result.kernel_file = str(source)
    result.initial_ms = check.timing.median_ms
    if _degenerate(result, check):
        _record_times(result, check)
        return

    kernels = [k.name for k in global_kernels(text)]
    if not kernels:  # a given file that launches only library code: nothing to optimize
        _stop(result, "the kernel file defines no __global__ kernel", kind=None, status="failed")
        return
    result.kernel = kernels[0]  # the first in the file: a naive file's main kernel
    request = OptimizeRequest(
        source=str(source),
        source_text=text,
        kernel=result.kernel,
        rollouts=run.config.rollouts,
        depth=run.config.depth,
        top_k=run.config.top_k,
        seed=services.seed,
        settings=settings,
    )
    outcome = run_optimization(
        OptimizeRun(
            request=request,
            client=services.client,
            kb=services.kb,
            evaluate=checks,  # gated by the loop, at the problem's gates
            run_rollouts=runner_for(settings),  # at once, over the GPUs of gpu_index
            origin=origin,
            gates=gates,
        )
    )
    result.steps = len(outcome.steps)
    result.rollouts_wall_s = outcome.rollouts_wall_s
    result.optimize_phases = outcome.phases
    result.step_phases = [step.phases for step in outcome.steps]
    result.step_outcomes = [step.outcome for step in outcome.steps]
    result.step_speedups = [step.measured_speedup for step in outcome.steps]
    result.optimize_wall_s = outcome.wall_s
    result.sanitizer, result.passed_over = outcome.sanitizer, outcome.passed_over
    result.detail = f"optimize: {outcome.error}" if outcome.error else ""
    best = text
    if outcome.improved and outcome.best_source is not None:
        best = outcome.best_source
        result.techniques = outcome.techniques
        result.kernel_file = str(optimized_copy_path(source))
        save_file(optimized_copy_path(source), best, force=True)

    # Nothing faster: the first kernel's check is its final timing. The best candidate's is its
    # sanitizer run's check, made once at the loop's end; where that check failed for a reason of
    # the machine, its step's timing over the first check's baselines.
    final_check = check
    if best != text and outcome.best_check is not None:
        final_check = outcome.best_check
    if not _degenerate(result, final_check):
        result.status = "verified"
    if best != text and outcome.best_check is None:
        assert outcome.best_time_ms is not None  # an improved run's best was timed
        _record_times(result, check, final_ms=outcome.best_time_ms)
    else:
        _record_times(result, final_check)


def _first_kernel(text: str) -> str | None:
    kernels = global_kernels(text)
    return kernels[0].name if kernels else None


def _checked(evaluation: Evaluation) -> bool:
    """Verified and timed, though the evaluation failed after (its profile)."""
    check = evaluation.check
    return bool(check and check.verify and check.verify.ok and check.timing)


def _join_baselines(result: ProblemResult, job: BaselinesJob) -> None:
    """The baselines measured apart join the record: they replace whatever a check read from
    the cache (the same measurement, or none yet), and the speedups are taken over them."""
    measured, error = job.join()
    result.baselines_phases = job.phases
    if error is not None:
        note = f"baselines: {error.message} {error.fix}".strip()
        result.detail = f"{result.detail}; {note}" if result.detail else note
    if measured is None or measured.eager is None:
        return
    result.eager_ms = measured.eager.median_ms
    result.compile_ms = measured.compiled.median_ms if measured.compiled else None
    if result.final_ms is not None:
        _speedups(result)


def _record_times(
    result: ProblemResult, check: CheckResult, *, final_ms: float | None = None
) -> None:
    """The final time (`check`'s, or `final_ms`) and the baselines of `check`."""
    assert check.timing is not None
    result.final_ms = final_ms or check.timing.median_ms
    result.eager_ms = check.eager.median_ms if check.eager else None
    result.compile_ms = check.compiled.median_ms if check.compiled else None
    _speedups(result)


def _speedups(result: ProblemResult) -> None:
    """The speedups of final_ms (and initial_ms) over the faster measured baseline."""
    assert result.final_ms is not None
    result.speedup = result.speedup_vs_eager = result.speedup_vs_compile = None
    measured: list[tuple[float | None, Baseline]] = [
        (result.eager_ms, "eager"),
        (result.compile_ms, "torch.compile"),
    ]
    baselines = [(ms, name) for ms, name in measured if ms]
    if not baselines:
        return
    baseline_ms, result.baseline = min(baselines)
    result.speedup = baseline_ms / result.final_ms
    if result.eager_ms:
        result.speedup_vs_eager = result.eager_ms / result.final_ms
    if result.compile_ms:
        result.speedup_vs_compile = result.compile_ms / result.final_ms
    if result.initial_ms:
        result.initial_speedup = baseline_ms / result.initial_ms
        result.optimize_speedup = result.initial_ms / result.final_ms


def degenerate_reference(check: CheckResult | None) -> str | None:
    """Why the reference can't tell a right kernel from a wrong one, or None: its output is
    (nearly) all zeros or one constant on get_inputs() and on every input scale the
    verification tried (a weak output that scaled inputs made informative was verified there)."""
    if check is None or check.verify is None:
        return None
    for warning in check.verify.warnings:
        if warning.kind == "weak_reference" and not warning.evidence.get("input_scale"):
            return warning.message
    return None


def _degenerate(result: ProblemResult, check: CheckResult) -> bool:
    reason = degenerate_reference(check)
    if reason is not None:
        result.status = "degenerate_reference"
        result.detail = reason
    return reason is not None


# Harness errors that are the problem's own, not its kernel's: no kernel could pass.
_PROBLEM_ERRORS: dict[str, Status] = {
    "out_of_memory": "out_of_memory",
    "bad_reference": "bad_reference",
}


def _stop(
    result: ProblemResult,
    message: str,
    *,
    kind: str | None,
    status: Status,
    llm_error: str | None = None,
) -> None:
    """Record why the problem ends here, or stop the run when no problem could get further."""
    if kind in MACHINE_ERROR_KINDS or llm_error in ENDPOINT_ERRORS:
        raise RunAborted(message)
    result.status = _PROBLEM_ERRORS.get(kind or "", status)
    result.detail = message


def _fail(result: ProblemResult, evaluation: Evaluation) -> None:
    """A kernel that was verified once (or given) fails its check."""
    if evaluation.error is not None:
        error = evaluation.error
        _stop(result, f"{error.message} {error.fix}".strip(), kind=error.kind, status="failed")
        return
    feedback = evaluation.feedback
    _stop(result, feedback.message if feedback else evaluation.outcome, kind=None, status="failed")
