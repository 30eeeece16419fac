"""The MAIC-RL optimization loop: rollouts × depth steps of select → lower → verify → time →
re-profile → re-classify → record, then a textual-gradient policy update.

Each rollout starts from the original kernel; each step samples a technique from the KB's
ranking for the *current* state (weighted random top-k), so the state is re-derived after every
verified step, as the paper intends. Every attempt is written to the KB as it happens, so a
cancelled run keeps what it learned, and rollouts running at the same time rank with each
other's results as they land. A rollout is a unit of work (`run_rollout`: a picklable
RolloutPlan in, a RolloutResult out) that `optimize` hands to a runner: one after another here
(`in_sequence`), one worker per GPU (agents.rollout_runners) or Ray tasks (agents.ray_rollouts).
The user's file is never touched here.

The harness (`evaluate_fn`) and the lowering agent (`lower_fn`) are parameters: the replay mode
(agents/replay.py) answers both from a measured table."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from kernelblaster.agents.evaluation import Evaluation, evaluate
from kernelblaster.agents.llm import LlmClient, LlmError, Usage
from kernelblaster.agents.lowering import Feedback, LoweringInput, LoweringResult, lower
from kernelblaster.agents.policy_update import update_policy
from kernelblaster.agents.records import PerfState
from kernelblaster.agents.soft_verify import soft_verify
from kernelblaster.agents.state_extractor import refine_state
from kernelblaster.harness.targets import Target, resolve_target
from kernelblaster.kb.ranking import select
from kernelblaster.kb.records import Attempt, RankedTechnique, Technique, code_hash
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

# A verified candidate must beat the kernel it started from by this factor to count as a
# success: smaller differences are within the timing spread of a median over trials.
MIN_SPEEDUP = 1.02

Evaluate = Callable[..., Evaluation]
Lower = Callable[..., LoweringResult]  # lower()'s signature; the replay mode scripts it


class Step(msgspec.Struct, kw_only=True):
    rollout: int
    depth: int
    technique: str
    state_before: str
    predicted_speedup: float
    outcome: str
    measured_speedup: float | None = None
    state_after: str | None = None
    detail: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    fatal: bool = False  # the LLM or the harness is unavailable: later steps would fail too


class OptimizeOutcome(msgspec.Struct, kw_only=True):
    kernel: str
    arch: str = ""
    improved: bool = False
    best_source: str | None = None
    best_time_ms: float | None = None
    original_time_ms: float | None = None
    speedup: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    techniques: list[str] = []
    steps: list[Step] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cancelled: bool = False
    policy_notes: int = 0
    error: str | None = None


class _Point(msgspec.Struct, kw_only=True):
    """A verified kernel version: where a rollout stands."""

    source: str
    time_ms: float
    state: PerfState
    techniques: list[str] = []
    eager_ms: float | None = None
    compile_ms: float | None = None


class RolloutPlan(msgspec.Struct, kw_only=True):
    """What every rollout of one optimize run shares; plain data, so it can be sent to another
    process or host. `settings` names the GPU the rollout runs on."""

    source: Path
    kernel: str
    origin: _Point
    target: Target
    reference_text: str
    constraints: list[str]
    depth: int
    k: int
    technique: str | None = None  # forced for the first step of rollout 0
    seed: int | None = None
    temperature: float = 1.0  # of the top-k sampling
    settings: Settings


class RolloutResult(msgspec.Struct, kw_only=True):
    rollout: int
    steps: list[Step] = []
    verified: list[_Point] = []  # the candidates that beat where their step started
    attempts: list[Attempt] = []  # as recorded in the KB
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cancelled: bool = False
    error: str | None = None  # the LLM or the harness became unavailable


@dataclass(frozen=True)
class RolloutServices:
    """The live objects a rollout uses, shared by the rollouts of one process."""

    client: LlmClient
    kb: KnowledgeBase
    evaluate_fn: Evaluate
    lower_fn: Lower
    cancelled: Callable[[], bool]
    # after each step: a line saying what happened, and the time of a new verified candidate
    report: Callable[[str, float | None], None]


RunRollouts = Callable[[RolloutPlan, int, RolloutServices], list[RolloutResult]]


def constraints_for(target: Target, settings: Settings) -> list[str]:
    rules = [
        f"Keep `{target.entry}` with exactly the same signature and calling convention.",
        "Compute the complete result for every valid input: no skipped elements, no "
        "hard-coded sizes beyond what the launcher receives.",
        "Do not cache results across calls and do not launch work on other streams.",
    ]
    if not (target.allow_library_calls or settings.allow_library_calls):
        rules.append("Do all the work in your own CUDA kernels: no cuBLAS, cuDNN or torch ops.")
    return rules


def _start(
    source: Path, text: str, kernel: str, settings: Settings, evaluate_fn: Evaluate
) -> _Point | str:
    evaluation = evaluate_fn(source, text, kernel, settings, depth="full")
    if not evaluation.verified or evaluation.state is None or evaluation.time_ms is None:
        reason = (
            evaluation.error.message
            if evaluation.error
            else (evaluation.feedback.message if evaluation.feedback else "no profile of it")
        )
        return f"the original {kernel} can't be optimized until it verifies and profiles: {reason}"
    check = evaluation.check
    return _Point(
        source=text,
        time_ms=evaluation.time_ms,
        state=evaluation.state,
        eager_ms=check.eager.median_ms if check and check.eager else None,
        compile_ms=check.compiled.median_ms if check and check.compiled else None,
    )


def optimize(
    source: Path,
    text: str,
    kernel: str,
    *,
    settings: Settings,
    client: LlmClient,
    kb: KnowledgeBase,
    rollouts: int,
    depth: int,
    k: int,
    technique: str | None = None,
    seed: int | None = None,
    on_progress: Callable[[int, int, str, float | None], None] = lambda *_: None,
    cancelled: Callable[[], bool] = lambda: False,
    evaluate_fn: Evaluate = evaluate,
    lower_fn: Lower = lower,
    temperature: float = 1.0,
    run_rollouts: RunRollouts | None = None,
) -> OptimizeOutcome:
    """`run_rollouts` runs the rollouts (default: one after another, on settings.gpu)."""
    outcome = OptimizeOutcome(kernel=kernel)
    target = resolve_target(source, settings)
    if not isinstance(target, Target):
        outcome.error = f"{target.message} {target.fix}"
        return outcome
    on_progress(0, rollouts * depth, f"profiling the original {kernel}", None)
    origin = _start(source, text, kernel, settings, evaluate_fn)
    if isinstance(origin, str):
        outcome.error = origin
        return outcome
    origin.state = _known_state(client, kb, origin.state, outcome)
    arch = origin.state.arch
    outcome.arch, outcome.original_time_ms = arch, origin.time_ms
    plan = RolloutPlan(
        source=source,
        kernel=kernel,
        origin=origin,
        target=target,
        reference_text=Path(target.reference).read_text("utf-8") if target.reference else "",
        constraints=constraints_for(target, settings),
        depth=depth,
        k=k,
        technique=technique,
        seed=seed,
        temperature=temperature,
        settings=settings,
    )
    services = RolloutServices(
        client=client,
        kb=kb,
        evaluate_fn=evaluate_fn,
        lower_fn=lower_fn,
        cancelled=cancelled,
        report=_Progress(rollouts * depth, origin.time_ms, on_progress),
    )
    results = (run_rollouts or in_sequence)(plan, rollouts, services)
    verified: list[_Point] = []
    run_attempts: list[Attempt] = []
    for result in sorted(results, key=lambda r: r.rollout):
        outcome.steps += result.steps
        outcome.prompt_tokens += result.prompt_tokens
        outcome.completion_tokens += result.completion_tokens
        outcome.cancelled = outcome.cancelled or result.cancelled
        outcome.error = outcome.error or result.error
        verified += result.verified
        run_attempts += result.attempts
    # Rollouts that another's error stopped count as stopped by it, not as cancelled by the user.
    outcome.cancelled = outcome.cancelled and outcome.error is None
    if run_attempts and not outcome.cancelled and outcome.error is None:
        outcome.policy_notes = _update_policy(client, kb, arch, run_attempts, outcome)
    best = _memory_safe_best(
        source, kernel, origin, verified, settings=settings, kb=kb, evaluate_fn=evaluate_fn
    )
    return _finish(outcome, origin, best)


def in_sequence(plan: RolloutPlan, rollouts: int, services: RolloutServices) -> list[RolloutResult]:
    """The rollouts one after another; none starts after one was cancelled or hit an error."""
    results: list[RolloutResult] = []
    for rollout in range(rollouts):
        results.append(run_rollout(plan, rollout, services))
        if results[-1].cancelled or results[-1].error:
            break
    return results


def run_rollout(plan: RolloutPlan, rollout: int, services: RolloutServices) -> RolloutResult:
    """One trajectory of up to plan.depth steps from the original kernel, each attempt
    recorded in the KB as it happens."""
    kb, client = services.kb, services.client
    result = RolloutResult(rollout=rollout)
    current = plan.origin
    for step_index in range(plan.depth):
        if services.cancelled():
            result.cancelled = True
            break
        if current.state.near_limit:
            services.report(f"rollout {rollout + 1}: at the roof, stopping", None)
            break
        forced = plan.technique if (rollout == 0 and step_index == 0) else None
        step_seed = None if plan.seed is None else plan.seed + rollout * plan.depth + step_index + 1
        choice = _choose(
            kb,
            current.state,
            k=plan.k,
            forced=forced,
            seed=step_seed,
            temperature=plan.temperature,
        )
        if choice is None:
            break
        step, candidate = _step(
            plan.source, current, choice, plan.kernel,
            target=plan.target, settings=plan.settings, client=client, kb=kb,
            reference_text=plan.reference_text, constraints=plan.constraints,
            evaluate_fn=services.evaluate_fn, lower_fn=services.lower_fn,
            rollout=rollout, depth=step_index,
        )  # fmt: skip
        if candidate is not None:
            candidate.state = _known_state(client, kb, candidate.state, result)
            step.state_after = candidate.state.state
        result.steps.append(step)
        result.prompt_tokens += step.prompt_tokens
        result.completion_tokens += step.completion_tokens
        attempt = _attempt(step, plan.origin.state.arch, plan.kernel, current.source, candidate)
        kb.record(attempt)
        result.attempts.append(attempt)
        if step.fatal:
            result.error = step.detail
            break
        improved = candidate is not None and step.outcome == "success"
        if improved:
            current = candidate
            result.verified.append(candidate)
        services.report(
            f"rollout {rollout + 1} step {step_index + 1}: {step.technique} predicted "
            f"{step.predicted_speedup:.2f}x, {_measured(step)}",
            candidate.time_ms if improved else None,
        )
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


def _memory_safe_best(
    source: Path,
    kernel: str,
    origin: _Point,
    verified: list[_Point],
    *,
    settings: Settings,
    kb: KnowledgeBase,
    evaluate_fn: Evaluate,
) -> _Point:
    """The fastest verified candidate that also passes compute-sanitizer (memcheck, and
    racecheck with shared memory): numbers that happen to match don't prove memory safety.
    Candidates that fail are recorded as rejected attempts."""
    for candidate in sorted(verified, key=lambda p: p.time_ms):
        if candidate.time_ms >= origin.time_ms:
            break
        evaluation = evaluate_fn(
            source, candidate.source, kernel, settings, sanitize=True, profile=False
        )
        if evaluation.verified:
            return candidate
        kb.record(
            Attempt(
                id=uuid.uuid4().hex,
                time=time.time(),
                arch=origin.state.arch,
                kernel=kernel,
                source_hash=code_hash(origin.source),
                candidate_hash=code_hash(candidate.source),
                before_state=origin.state.state,
                technique=candidate.techniques[-1],
                predicted_speedup=1.0,
                outcome="rejected",
                correctness_detail=(evaluation.feedback.message if evaluation.feedback else "")[
                    :500
                ],
                error_kind="sanitizer",
            )
        )
    return origin


def _measured(step: Step) -> str:
    if step.measured_speedup is not None:
        return f"measured {step.measured_speedup:.2f}x ({step.outcome})"
    return f"{step.outcome}: {step.detail[:120]}"


def _known_state(
    client: LlmClient, kb: KnowledgeBase, state: PerfState, outcome: OptimizeOutcome | RolloutResult
) -> PerfState:
    """`state` under the KB's name for it. The classifier's ids are the KB's own except for
    rarer states the catalog lacks; for those the state extractor (an LLM) picks the closest
    known state or proposes a new one, taken only above its confidence threshold."""
    known = sorted(known_state.id for known_state in kb.states())
    if state.state in known:
        return state
    try:
        choice = refine_state(client, state, known)
    except LlmError:
        return state  # ranking copes with an unknown state: it offers every technique
    outcome.prompt_tokens += choice.usage.prompt_tokens
    outcome.completion_tokens += choice.usage.completion_tokens
    if choice.source == "new":
        kb.ensure_state(choice.state, choice.rationale)
    return msgspec.structs.replace(state, state=choice.state)


def _choose(
    kb: KnowledgeBase,
    state: PerfState,
    *,
    k: int,
    forced: str | None,
    seed: int | None,
    temperature: float,
) -> RankedTechnique | None:
    ranked = kb.rank(state.arch, state.state, state.findings)
    if forced is not None:
        match = next((r for r in ranked if r.technique == forced), None)
        if match is not None:
            return match
        # The user asked for it although the KB doesn't rank it for this state: honour that,
        # predicting the catalog prior.
        technique = next((t for t in kb.techniques() if t.id == forced), None)
        if technique is not None:
            return RankedTechnique(
                technique=technique.id,
                title=technique.title,
                category=technique.category,
                predicted_speedup=technique.prior_speedup,
                confidence=0.0,
                attempts=0,
                successes=0,
                regressions=0,
                failures=0,
                mean_speedup=None,
                basis="prior",
                notes=[],
                explanation=technique.prior_source,
            )
    picked = select(ranked[: max(k, 1)], 1, temperature=temperature, seed=seed)
    return picked[0] if picked else None


def _step(
    source: Path,
    current: _Point,
    choice: RankedTechnique,
    kernel: str,
    *,
    target: Target,
    settings: Settings,
    client: LlmClient,
    kb: KnowledgeBase,
    reference_text: str,
    constraints: list[str],
    evaluate_fn: Evaluate,
    lower_fn: Lower,
    rollout: int,
    depth: int,
) -> tuple[Step, _Point | None]:
    step = Step(
        rollout=rollout,
        depth=depth,
        technique=choice.technique,
        state_before=current.state.state,
        predicted_speedup=choice.predicted_speedup,
        outcome="error",
    )
    evaluations: dict[str, Evaluation] = {}
    latest: list[Evaluation] = []  # in the order checked (a candidate may come back twice)

    def check(candidate: str) -> Feedback | None:
        evaluation = evaluate_fn(source, candidate, kernel, settings)
        evaluations[code_hash(candidate)] = evaluation
        latest.append(evaluation)
        if evaluation.error is not None:  # not the candidate's fault: stop retrying
            raise _HarnessUnavailable(evaluation.error.message)
        return evaluation.feedback

    technique = _technique(kb, choice)
    try:
        lowered = lower_fn(
            client,
            LoweringInput(
                source=current.source,
                kernel=kernel,
                state=current.state,
                technique=technique,
                notes=choice.notes,
                constraints=constraints,
                entry_names=[target.entry],
            ),
            check=check,
        )
    except LlmError as exc:
        step.detail, step.fatal = f"LLM: {exc}", True
        return step, None
    except _HarnessUnavailable as exc:
        step.detail, step.fatal = f"harness: {exc}", True
        return step, None
    step.prompt_tokens, step.completion_tokens = _tokens(lowered.usage)
    if lowered.source is None:
        # "error" when no candidate ever reached the harness: every reply was unusable.
        step.outcome = latest[-1].outcome if latest else "error"
        step.detail = "; ".join(lowered.failures)[-500:]
        return step, None
    evaluation = evaluations[code_hash(lowered.source)]
    try:
        verdict = soft_verify(
            client,
            reference_source=reference_text,
            original_source=current.source,
            candidate_source=lowered.source,
            constraints=constraints,
        )
    except LlmError as exc:
        step.detail, step.fatal = f"LLM: {exc}", True
        return step, None
    prompt, completion = _tokens(verdict.usage)
    step.prompt_tokens += prompt
    step.completion_tokens += completion
    if not verdict.ok:
        step.outcome = "rejected"
        step.detail = "soft verification: " + "; ".join(verdict.reasons)
        return step, None
    assert evaluation.time_ms is not None
    step.measured_speedup = current.time_ms / evaluation.time_ms
    step.outcome = "success" if step.measured_speedup >= MIN_SPEEDUP else "regression"
    step.detail = (
        evaluation.check.verify.message if evaluation.check and evaluation.check.verify else ""
    )
    state = evaluation.state or current.state
    step.state_after = state.state
    return step, _Point(
        source=lowered.source,
        time_ms=evaluation.time_ms,
        state=state,
        techniques=[*current.techniques, choice.technique],
    )


class _HarnessUnavailable(Exception):
    pass


def _technique(kb: KnowledgeBase, choice: RankedTechnique) -> Technique:
    """The catalog entry of a ranked technique; a learned one (not in the catalog) is described
    by its title, which is all the KB knows of it."""
    found = next((t for t in kb.techniques() if t.id == choice.technique), None)
    return found or Technique(
        id=choice.technique,
        category="learned",
        title=choice.title,
        description=choice.title,
        how_to_apply=choice.explanation or choice.title,
    )


def _tokens(usage: Usage) -> tuple[int, int]:
    return usage.prompt_tokens, usage.completion_tokens


def _attempt(
    step: Step, arch: str, kernel: str, started_from: str, candidate: _Point | None
) -> Attempt:
    return Attempt(
        id=uuid.uuid4().hex,
        time=time.time(),
        arch=arch,
        kernel=kernel,
        source_hash=code_hash(started_from),
        candidate_hash=code_hash(candidate.source) if candidate else "",
        before_state=step.state_before,
        after_state=step.state_after,
        technique=step.technique,
        predicted_speedup=step.predicted_speedup,
        measured_speedup=step.measured_speedup,
        outcome=step.outcome,
        correctness_detail=step.detail[:500],
        prompt_tokens=step.prompt_tokens,
        completion_tokens=step.completion_tokens,
        error_kind=(step.detail.split(":")[0] if step.fatal else "unusable_reply")
        if step.outcome == "error"
        else None,
    )


def _update_policy(
    client: LlmClient,
    kb: KnowledgeBase,
    arch: str,
    attempts: list[Attempt],
    outcome: OptimizeOutcome,
) -> int:
    try:
        result = update_policy(client, kb, arch=arch, attempts=attempts)
    except LlmError as exc:
        outcome.error = f"policy update skipped: {exc}"
        return 0
    outcome.prompt_tokens += result.usage.prompt_tokens
    outcome.completion_tokens += result.usage.completion_tokens
    return len(result.applied)


def _finish(outcome: OptimizeOutcome, origin: _Point, best: _Point) -> OptimizeOutcome:
    outcome.best_time_ms = best.time_ms
    if best is not origin:
        outcome.improved = True
        outcome.best_source = best.source
        outcome.techniques = best.techniques
        outcome.speedup = origin.time_ms / best.time_ms
        if origin.eager_ms:
            outcome.speedup_vs_eager = origin.eager_ms / best.time_ms
        if origin.compile_ms:
            outcome.speedup_vs_compile = origin.compile_ms / best.time_ms
    return outcome
