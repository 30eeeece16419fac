"""The MAIC-RL optimization loop (`run_optimization`): the original kernel profiled, rollouts ×
depth steps of select → lower → verify → time → re-profile → re-classify → record, the best
memory-safe candidate, then the textual-gradient policy update. Rollouts run in sequence, at
once, or as Ray tasks; `evaluate` and `lower` are injection points (the replay mode answers both
from a table). The user's file is never touched here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernelblaster.agents.llm.client import LlmClient, LlmError
from kernelblaster.agents.llm.lowering import lower
from kernelblaster.agents.loop.best import memory_safe_best
from kernelblaster.agents.loop.choice import known_state
from kernelblaster.agents.loop.evaluation import Evaluation, evaluate
from kernelblaster.agents.loop.gpu_gates import GatedEvaluate, GpuGates
from kernelblaster.agents.loop.plan import (
    Evaluate,
    Lower,
    Offered,
    OnProgress,
    RolloutPlan,
    RolloutResult,
    RolloutServices,
    RunRollouts,
    VerifiedKernel,
    every_technique,
)
from kernelblaster.agents.loop.rollout import in_sequence
from kernelblaster.agents.loop.step_clock import StepClock
from kernelblaster.agents.policy.update import update_policy
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeRequest,
    OptimizeResult,
    PhaseTimes,
)
from kernelblaster.harness.protocol.worker_client import prewarm_harness_workers
from kernelblaster.harness.target.targets import Target, kept_functions, resolve_target
from kernelblaster.kb.records import (
    Attempt,
)
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings


def _never() -> bool:
    return False


def _no_progress(step: int, total: int, message: str, best_speedup: float | None) -> None:
    pass


@dataclass(frozen=True)
class OptimizeRun:
    """The context of one optimize run: what to optimize (the worker's request, as the editor
    or the CLI sent it), and the live objects it runs with. `evaluate` (the harness) and `lower`
    (the lowering agent) are the injection points the replay mode and the tests script;
    `run_rollouts` runs the rollouts (default: one after another, on settings.gpu)."""

    request: OptimizeRequest
    client: LlmClient
    kb: KnowledgeBase
    evaluate: Evaluate = evaluate
    lower: Lower = lower
    offered: Offered = every_technique
    on_progress: OnProgress = _no_progress
    cancelled: Callable[[], bool] = _never
    run_rollouts: RunRollouts | None = None
    # The original's evaluation at depth "full", when the caller has made it (the KernelBench
    # runner's check of a given kernel): the run starts from it instead of evaluating again.
    origin: Evaluation | None = None
    # The GPUs' gates, when the caller shares them with work of its own that must not run
    # beside an evaluation (the KernelBench runner's baselines, agents/kernelbench/baselines.py)
    gates: GpuGates | None = None


def optimized_copy_path(source: Path) -> Path:
    """Where the best candidate goes without --apply: beside the source, as NAME.optimized.cu."""
    return source.with_name(f"{source.stem}.optimized{source.suffix}")


def constraints_for(target: Target, settings: Settings) -> list[str]:
    kept = ", ".join(f"`{name}`" for name in kept_functions(target))
    rules = [
        f"Keep {kept} with exactly the same signature and calling convention.",
        "Compute the complete result for every valid input: no skipped elements, no "
        "hard-coded sizes beyond what the launcher receives.",
        "Do not cache results across calls and do not launch work on other streams.",
    ]
    if target.bindings is not None:
        rules.append(
            f"{Path(target.bindings).name} (not shown, not yours to change) calls {kept} and "
            "owns the torch side: keep this file free of torch headers."
        )
    if not (target.allow_library_calls or settings.allow_library_calls):
        rules.append("Do all the work in your own CUDA kernels: no cuBLAS, cuDNN or torch ops.")
    return rules


def _start(run: OptimizeRun, evaluate: Evaluate, phases: PhaseTimes) -> VerifiedKernel | str:
    request = run.request
    evaluation = run.origin
    if evaluation is None:
        evaluation = evaluate(
            Path(request.source),
            request.source_text,
            request.kernel,
            request.settings,
            depth="full",
        )
        phases.add(evaluation.phases)
    if not evaluation.verified or evaluation.state is None or evaluation.time_ms is None:
        reason = (
            evaluation.error.message
            if evaluation.error
            else (evaluation.feedback.message if evaluation.feedback else "no profile of it")
        )
        return (
            f"the original {request.kernel} can't be optimized until it verifies and profiles: "
            f"{reason}"
        )
    check = evaluation.check
    return VerifiedKernel(
        source=request.source_text,
        time_ms=evaluation.time_ms,
        state=evaluation.state,
        kernels=evaluation.kernels,
        eager_ms=check.eager.median_ms if check and check.eager else None,
        compile_ms=check.compiled.median_ms if check and check.compiled else None,
    )


def run_optimization(run: OptimizeRun) -> OptimizeResult:
    """Rollouts × depth steps on `run.request`'s kernel, then the policy update; the result
    says which verified, memory-safe candidate is best."""
    request, client, kb = run.request, run.client, run.kb
    source, settings = Path(request.source), request.settings
    started = time.time()
    result = OptimizeResult(kernel=request.kernel)
    target = resolve_target(source, settings)
    if not isinstance(target, Target):
        result.error = f"{target.message} {target.fix}"
        return result
    total = request.rollouts * request.depth
    run.on_progress(0, total, f"profiling the original {request.kernel}", None)
    # Each rollout GPU gets a worker that prewarms while the original is profiled, instead of
    # paying the start-up at its first step (spare workers only: see keep_spare_workers).
    prewarm_harness_workers(settings, settings.gpus())
    # Every evaluation of the run takes its GPU's gate: rollouts running at once queue only
    # their candidates' evaluations, one GPU evaluating one candidate at a time.
    gates = run.gates or GpuGates(slots=settings.parallel_gpu_jobs)
    evaluate_on_gpu = GatedEvaluate(run.evaluate, gates=gates)
    origin = _start(run, evaluate_on_gpu, result.phases)
    if isinstance(origin, str):
        result.error = origin
        result.wall_s = round(time.time() - started, 3)
        return result
    origin.state = known_state(client, kb, origin.state, result)
    arch = origin.state.arch
    result.arch, result.original_time_ms = arch, origin.time_ms
    plan = RolloutPlan(
        request=request,
        origin=origin,
        target=target,
        reference_text=Path(target.reference).read_text("utf-8") if target.reference else "",
        constraints=constraints_for(target, settings),
    )
    services = RolloutServices(
        client=client,
        kb=kb,
        evaluate=evaluate_on_gpu,
        lower=run.lower,
        cancelled=run.cancelled,
        offered=run.offered,
        report=_Progress(total, origin.time_ms, run.on_progress),
    )
    rollouts_began = time.time()
    rollouts = (run.run_rollouts or in_sequence)(plan, request.rollouts, services)
    result.rollouts_wall_s = round(time.time() - rollouts_began, 3)
    verified, attempts = _gathered(rollouts, result)
    best = _best_and_policy_update(plan, services, verified, attempts, result)
    result.wall_s = round(time.time() - started, 3)
    return _finish(result, origin, best)


def _gathered(
    rollouts: list[RolloutResult], result: OptimizeResult
) -> tuple[list[VerifiedKernel], list[Attempt]]:
    """The rollouts' steps, tokens, proposals and verdicts added to `result`, in rollout order;
    their verified candidates and recorded attempts."""
    verified: list[VerifiedKernel] = []
    attempts: list[Attempt] = []
    for rollout in sorted(rollouts, key=lambda r: r.rollout):
        result.steps += rollout.steps
        result.prompt_tokens += rollout.prompt_tokens
        result.completion_tokens += rollout.completion_tokens
        result.cancelled = result.cancelled or rollout.cancelled
        result.error = result.error or rollout.error
        result.proposals += rollout.proposals
        verified += rollout.verified
        attempts += rollout.attempts
    # Rollouts that another's error stopped count as stopped by it, not as cancelled by the user.
    result.cancelled = result.cancelled and result.error is None
    return verified, attempts


def _best_and_policy_update(
    plan: RolloutPlan,
    services: RolloutServices,
    verified: list[VerifiedKernel],
    attempts: list[Attempt],
    result: OptimizeResult,
) -> VerifiedKernel:
    """The best memory-safe candidate (best.py) and the policy update, at once: the update waits
    on the LLM, the best candidate's sanitizer run on the GPU."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-update") as pool:
        updating = None
        if attempts and not result.cancelled and result.error is None:
            arch = plan.origin.state.arch
            updating = pool.submit(
                _timed_policy_update, services.client, services.kb, arch, attempts, result
            )
        best, result.best_check = memory_safe_best(plan, verified, services, result)
        if updating is not None:
            result.policy_notes, waited = updating.result()
            result.phases.add(waited)  # here: the sanitizer run's phases were added meanwhile
    return best


def _timed_policy_update(
    client: LlmClient, kb: KnowledgeBase, arch: str, attempts: list[Attempt], result: OptimizeResult
) -> tuple[int, PhaseTimes]:
    """The policy update's notes written, and its wait for the LLM."""
    clock = StepClock(PhaseTimes())
    with clock.llm("policy_update"):
        notes = _update_policy(client, kb, arch, attempts, result)
    return notes, clock.phases


def _update_policy(
    client: LlmClient,
    kb: KnowledgeBase,
    arch: str,
    attempts: list[Attempt],
    result: OptimizeResult,
) -> int:
    try:
        update = update_policy(client, kb, arch=arch, attempts=attempts)
    except LlmError as exc:
        result.error = f"policy update skipped: {exc}"
        return 0
    result.prompt_tokens += update.usage.prompt_tokens
    result.completion_tokens += update.usage.completion_tokens
    return len(update.applied)


def _finish(result: OptimizeResult, origin: VerifiedKernel, best: VerifiedKernel) -> OptimizeResult:
    result.best_time_ms = best.time_ms
    if best is not origin:
        result.improved = True
        result.best_source = best.source
        result.techniques = best.techniques
        result.speedup = origin.time_ms / best.time_ms
        if origin.eager_ms:
            result.speedup_vs_eager = origin.eager_ms / best.time_ms
        if origin.compile_ms:
            result.speedup_vs_compile = origin.compile_ms / best.time_ms
    return result


class _Progress:
    """Counts the steps of rollouts that may run at once, and reports each with the best speedup
    so far."""

    def __init__(self, total: int, original_ms: float, on_progress: Callable[..., None]):
        self._total, self._original_ms, self._on_progress = total, original_ms, on_progress
        self._done, self._best_ms = 0, original_ms
        self._lock = threading.Lock()

    def __call__(self, message: str, verified_ms: float | None) -> None:
        with self._lock:
            self._done += 1
            if verified_ms is not None:
                self._best_ms = min(self._best_ms, verified_ms)
            self._on_progress(self._done, self._total, message, self._original_ms / self._best_ms)
