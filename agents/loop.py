"""The MAIC-RL optimization loop: rollouts × depth steps of select → lower → verify → time →
re-profile → re-classify → record, then a textual-gradient policy update.

Each rollout starts from the original kernel; each step samples a technique from the KB's
ranking for the *current* state (weighted random top-k), so the state is re-derived after every
verified step, as the paper intends. A kernel with nothing left to try (at its roof, or every
technique failed there) is a dead end: the rollout goes back along its branch with the steps
it has left, and a success that led to one is not re-applied (it would re-derive it). Every
attempt is written to the KB as it happens, so a cancelled run keeps what it learned, and
rollouts running at the same time rank with each other's results as they land. A rollout is a
unit of work (`run_rollout`: a picklable RolloutPlan in, a RolloutResult out) that
`run_optimization` hands to a runner: one after another here (`in_sequence`), all at once with
their evaluations queued per GPU (agents.rollout_runners), or Ray tasks (agents.ray_rollouts).
The user's file is never touched here.

A run is an OptimizeRun: the worker's OptimizeRequest and the live objects it runs with. Its
result is the OptimizeResult the worker sends to the editor, unchanged; each step is an
OptimizeStep, and the KB's Attempt row is made from it (`kb_attempt`). The harness (`evaluate`)
and the lowering agent (`lower`) are injection points: the replay mode (agents/replay.py)
answers both from a measured table.

A candidate is whatever the target's launcher launches: it is profiled in full, and its state is
its dominant kernel's by GPU time (agents/evaluation.py), so a rewrite that renames, splits or
fuses kernels is verified and ranked like any other, and the next step starts from the
candidate under its new kernel name. Every LLM call's tokens land in its step and the run's
totals, whatever the outcome. A failure of the harness or the endpoint themselves (no GPU, ncu
counter permission, the endpoint down) ends the run and is recorded as an "infrastructure"
outcome, which the KB's statistics ignore: it says nothing about the technique.

Step acceptance: a step is kept (the rollout continues from its candidate) when it verified and
beat where it started by MIN_SPEEDUP, or when it verified and its technique is a catalog
enabler (kb/catalog/catalog.toml `[[enabler]]`, e.g. tiling before tensor cores) with depth
left to build on it. Every kept step with depth left is credited for what it enables: its KB row
is written when its branch ends (a dead end or the rollout's last step), with the measured
speedup `credited_speedup(own, chained)`, the larger of its own speedup and the speedup from
where it started to the best candidate verified later on the branch, discounted
(CHAIN_DISCOUNT): so an enabler (tiling, then register tiles on it) outranks a one-step dead
end that is faster on its own. Success when that beats MIN_SPEEDUP.

`offered` (an injection point like `evaluate` and `lower`) names the techniques the lowering
can apply to a kernel; the replay mode offers only its library's rewrites, so a gap in the
library is neither a step spent nor a failure recorded against the technique.

An open action space: when the KB has no technique left for a step's state (none addresses its
findings, or all were tried on this source), the LLM proposes new ones first
(agents/proposals.py), once per state and source in a rollout, and the step tries one of those
it accepted; the verdicts, kept or not, are the result's `proposals`."""

from __future__ import annotations

import functools
import math
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from kernelblaster.agents.evaluation import Evaluation, evaluate
from kernelblaster.agents.gpu_gates import GatedEvaluate, GpuGates
from kernelblaster.agents.in_flight import InFlight
from kernelblaster.agents.llm import LlmClient, LlmError, Usage
from kernelblaster.agents.lowering import Feedback, LoweringInput, LoweringResult, lower
from kernelblaster.agents.policy_update import update_policy
from kernelblaster.agents.proposals import propose_where_needed
from kernelblaster.agents.soft_verify import soft_verify
from kernelblaster.agents.state_extractor import refine_state
from kernelblaster.agents.step_clock import StepClock
from kernelblaster.harness.protocol.optimize_protocol import (
    LaunchedKernel,
    OptimizeRequest,
    OptimizeResult,
    OptimizeStep,
    PhaseTimes,
    ProposalVerdict,
)
from kernelblaster.harness.protocol.records import CheckResult, PerfState
from kernelblaster.harness.protocol.worker_client import prewarm_harness_workers
from kernelblaster.harness.target.targets import Target, kept_functions, resolve_target
from kernelblaster.kb.catalog import enablers
from kernelblaster.kb.ranking import finding_gains, select, target_finding
from kernelblaster.kb.records import (
    NO_TARGET,
    Attempt,
    RankedTechnique,
    Technique,
    code_hash,
    is_outcome,
)
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

# A verified candidate must beat the kernel it started from by this factor to count as a
# success: smaller differences are within the timing spread of a median over trials.
MIN_SPEEDUP = 1.02
# Credit per step of what a kept step enables: the chained speedup counts as chained**discount
# (1: as much as the step's own; 0: not at all).
CHAIN_DISCOUNT = 0.9

Evaluate = Callable[..., Evaluation]
Lower = Callable[..., LoweringResult]  # lower()'s signature; the replay mode scripts it
# The techniques the lowering agent can apply to a kernel (its source); None: every one.
Offered = Callable[[str], Collection[str] | None]


class VerifiedKernel(msgspec.Struct, kw_only=True):
    """A verified kernel version: where a rollout stands."""

    source: str
    time_ms: float
    state: PerfState  # its dominant kernel's (the original: the kernel the user chose)
    kernels: list[LaunchedKernel] = []  # every kernel it launches, dominant first
    techniques: list[str] = []
    eager_ms: float | None = None
    compile_ms: float | None = None
    made_by: OptimizeStep | None = None  # the step that produced it; None for the original


class RolloutPlan(msgspec.Struct, kw_only=True):
    """What every rollout of one optimize run shares; plain data, so it can be sent to another
    process or host. `request.settings` names the GPU the rollout runs on."""

    request: OptimizeRequest
    origin: VerifiedKernel
    target: Target
    reference_text: str
    constraints: list[str]

    @property
    def source(self) -> Path:
        return Path(self.request.source)

    def on_gpu(self, gpu: int) -> RolloutPlan:
        """This plan with its rollouts' harness work on GPU `gpu`."""
        settings = msgspec.structs.replace(self.request.settings, gpu_index=gpu)
        request = msgspec.structs.replace(self.request, settings=settings)
        return msgspec.structs.replace(self, request=request)


class RolloutResult(msgspec.Struct, kw_only=True):
    rollout: int
    steps: list[OptimizeStep] = []
    verified: list[VerifiedKernel] = []  # the candidates that beat where their step started
    attempts: list[Attempt] = []  # as recorded in the KB
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cancelled: bool = False
    error: str | None = None  # the LLM or the harness became unavailable
    proposals: list[ProposalVerdict] = []


def _never() -> bool:
    return False


def every_technique(source: str) -> None:
    return None


def _no_progress(step: int, total: int, message: str, best_speedup: float | None) -> None:
    pass


class SearchRecord:
    """What the rollouts of one run have found, in this process (a Ray task has its own): the
    fastest verified time, which a technique tried on a kernel the search comes back to must
    beat to add anything (kb.ranking.select), and the kernels with nothing left to try (source
    hashes: at their roof, or every technique failed there), whose branch is not walked again
    (`_untried_or_successful`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.best_ms = math.inf
        self.exhausted: set[str] = set()

    def verified(self, time_ms: float) -> None:
        with self._lock:
            self.best_ms = min(self.best_ms, time_ms)

    def behind(self, time_ms: float) -> float:
        """How far, in log speedup, a kernel of `time_ms` is behind the fastest found."""
        return max(0.0, math.log(time_ms / self.best_ms)) if self.best_ms < math.inf else 0.0


@dataclass(frozen=True)
class RolloutServices:
    """The live objects a rollout uses, shared by the rollouts of one process."""

    client: LlmClient
    kb: KnowledgeBase
    evaluate: Evaluate
    lower: Lower
    cancelled: Callable[[], bool]
    # after each step: a line saying what happened, and the time of a new verified candidate
    report: Callable[[str, float | None], None]
    in_flight: InFlight = field(default_factory=InFlight)  # steps out, of rollouts run at once
    # Held while a rollout asks for proposals: rollouts run at once that reach the same state
    # on the same source then see the first one's proposals in the KB instead of asking again
    # (and validating against a KB that does not have them yet).
    proposing: threading.Lock = field(default_factory=threading.Lock)
    offered: Offered = every_technique  # the replay's; live rollouts (any process) offer all
    search: SearchRecord = field(default_factory=SearchRecord)


RunRollouts = Callable[[RolloutPlan, int, RolloutServices], list[RolloutResult]]
# (steps done, steps in all, what happened, the best speedup so far)
OnProgress = Callable[[int, int, str, float | None], None]


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
    # beside an evaluation (the KernelBench runner's baselines, agents/baselines_job.py)
    gates: GpuGates | None = None


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
    origin.state = _known_state(client, kb, origin.state, result)
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
    verified: list[VerifiedKernel] = []
    run_attempts: list[Attempt] = []
    for rollout in sorted(rollouts, key=lambda r: r.rollout):
        result.steps += rollout.steps
        result.prompt_tokens += rollout.prompt_tokens
        result.completion_tokens += rollout.completion_tokens
        result.cancelled = result.cancelled or rollout.cancelled
        result.error = result.error or rollout.error
        result.proposals += rollout.proposals
        verified += rollout.verified
        run_attempts += rollout.attempts
    # Rollouts that another's error stopped count as stopped by it, not as cancelled by the user.
    result.cancelled = result.cancelled and result.error is None
    # The policy update waits on the LLM, the best candidate's sanitizer run on the GPU: at once.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-update") as pool:
        updating = None
        if run_attempts and not result.cancelled and result.error is None:
            updating = pool.submit(_timed_policy_update, client, kb, arch, run_attempts, result)
        best, result.best_check = _memory_safe_best(plan, verified, services, result.phases)
        if updating is not None:
            result.policy_notes, waited = updating.result()
            result.phases.add(waited)  # here: the sanitizer run's phases were added meanwhile
    result.wall_s = round(time.time() - started, 3)
    return _finish(result, origin, best)


def _timed_policy_update(
    client: LlmClient, kb: KnowledgeBase, arch: str, attempts: list[Attempt], result: OptimizeResult
) -> tuple[int, PhaseTimes]:
    """The policy update's notes written, and its wait for the LLM."""
    clock = StepClock(PhaseTimes())
    with clock.llm("policy_update"):
        notes = _update_policy(client, kb, arch, attempts, result)
    return notes, clock.phases


def in_sequence(plan: RolloutPlan, rollouts: int, services: RolloutServices) -> list[RolloutResult]:
    """The rollouts one after another; none starts after one was cancelled or hit an error."""
    results: list[RolloutResult] = []
    for rollout in range(rollouts):
        results.append(run_rollout(plan, rollout, services))
        if results[-1].cancelled or results[-1].error:
            break
    return results


def run_rollout(plan: RolloutPlan, rollout: int, services: RolloutServices) -> RolloutResult:
    """One trajectory of up to plan.request.depth steps from the original kernel, each attempt
    recorded in the KB as it happens."""
    kb, client, request = services.kb, services.client, plan.request
    result = RolloutResult(rollout=rollout)
    current = plan.origin
    # kept steps with depth left, credited when their branch ends: pending[i] made path[i + 1]
    pending: list[_KeptStep] = []
    path = [current]  # the kernels the rollout went through, the original first
    asked: set[tuple[str, str]] = set()  # (state, source hash) proposals were asked for
    for step_index in range(request.depth):
        if services.cancelled():
            result.cancelled = True
            break
        choose = functools.partial(_next_choice, plan, services, rollout, step_index, result, asked)
        choice = choose(current)
        while choice is None and len(path) > 1:
            # A dead end (at its roof, or nothing left to try) ends its branch, not the rollout:
            # back to the kernel the branch came from, with the steps left (backtracking).
            path.pop()
            _credit_kept(plan, services, result, [pending.pop()])
            current = path[-1]
            choice = choose(current)
        if choice is None:
            if current.state.near_limit:
                services.report(f"rollout {rollout + 1}: at the roof, stopping", None)
            break
        starting_hash = code_hash(current.source)
        step = OptimizeStep(
            rollout=rollout,
            depth=step_index,
            technique=choice.technique,
            state_before=current.state.state,
            predicted_speedup=choice.predicted_speedup,
            outcome="error",
            source_hash=code_hash(current.source),
            target_finding=choice.target_finding,
        )
        candidate = _step(plan, services, current, choice, step)
        if candidate is not None:
            candidate.state = _known_state(client, kb, candidate.state, result)
            step.state_after = candidate.state.state
        result.steps.append(step)
        result.prompt_tokens += step.prompt_tokens
        result.completion_tokens += step.completion_tokens
        if candidate is not None:
            services.search.verified(candidate.time_ms)
            for earlier in pending:
                earlier.reached(candidate.time_ms)
        # the candidate, when it is faster (verified and a success)
        improved = candidate if candidate is not None and step.outcome == "success" else None
        depth_left = step_index + 1 < request.depth
        enabler = candidate is not None and improved is None and _enables(step.technique)
        if candidate is not None and depth_left and (improved is not None or enabler):
            step.enabler = enabler
            pending.append(_KeptStep(step, current.time_ms, candidate.time_ms))
            path.append(candidate)
            if enabler:
                current = candidate
        else:
            _record(plan, services, result, step)
        services.in_flight.done(starting_hash, choice.technique)
        if step.fatal:
            result.error = step.detail
            break
        if improved is not None:
            current = improved
            result.verified.append(improved)
        services.report(
            f"rollout {rollout + 1} step {step_index + 1}: {step.technique} predicted "
            f"{step.predicted_speedup:.2f}x, {_measured(step)}",
            improved.time_ms if improved is not None else None,
        )
    _credit_kept(plan, services, result, pending)
    return result


def _next_choice(
    plan: RolloutPlan,
    services: RolloutServices,
    rollout: int,
    step_index: int,
    result: RolloutResult,
    asked: set[tuple[str, str]],
    current: VerifiedKernel,
) -> RankedTechnique | None:
    """What step `step_index` of the rollout tries on `current`; None when nothing is left to
    try there (at its roof, or every technique failed), which marks it exhausted."""
    request = plan.request
    starting_hash = code_hash(current.source)
    if current.state.near_limit:
        services.search.exhausted.add(starting_hash)
        return None
    forced = request.technique if (rollout == 0 and step_index == 0) else None
    proposed = [] if forced else _proposed(plan, services, current, result, asked)
    seed = request.seed
    step_seed = None if seed is None else seed + rollout * request.depth + step_index + 1
    choice = services.in_flight.choose(
        starting_hash,
        functools.partial(
            _choose,
            services.kb,
            current.state,
            source_hash=starting_hash if request.avoid_failed else None,
            k=request.top_k,
            forced=forced,
            seed=step_seed,
            temperature=request.temperature,
            exploration=request.exploration,
            offered=services.offered(current.source),
            kernel_hash=starting_hash,
            among=proposed,
            exhausted=services.search.exhausted,
            behind=services.search.behind(current.time_ms),
        ),
        lambda ranked: ranked.technique,
    )
    if choice is None:
        services.search.exhausted.add(starting_hash)
    return choice


def _credit_kept(
    plan: RolloutPlan, services: RolloutServices, result: RolloutResult, pending: list[_KeptStep]
) -> None:
    """Record the kept steps of a branch that ended, each credited with what it reached."""
    for kept in pending:
        kept.judge()
        _record(plan, services, result, kept.step)
    pending.clear()


def _enables(technique: str) -> bool:
    return technique in enablers()


def _record(
    plan: RolloutPlan, services: RolloutServices, result: RolloutResult, step: OptimizeStep
) -> None:
    attempt = kb_attempt(step, arch=plan.origin.state.arch, kernel=plan.request.kernel)
    with StepClock(step.phases).timed("kb_write"):
        services.kb.record(attempt)
    result.attempts.append(attempt)


def credited_speedup(own: float, chained: float, discount: float = CHAIN_DISCOUNT) -> float:
    """What a kept step is credited with: its own speedup, or the speedup from where it started
    to the best candidate reached from it (`chained`), whichever is larger; a chained gain
    counts as chained**discount (a chained loss is not softened)."""
    return max(own, chained**discount if chained > 1.0 else chained)


class _KeptStep:
    """A verified step the rollout continued from (faster, or an enabler); credited, when its
    branch ends, with what it enabled (`credited_speedup`)."""

    def __init__(self, step: OptimizeStep, started_ms: float, own_ms: float):
        self.step, self.started_ms, self.best_ms = step, started_ms, own_ms
        self.own_speedup = started_ms / own_ms

    def reached(self, time_ms: float) -> None:
        self.best_ms = min(self.best_ms, time_ms)

    def judge(self) -> None:
        step = self.step
        chained = self.started_ms / self.best_ms
        step.measured_speedup = credited_speedup(self.own_speedup, chained)
        step.outcome = "success" if step.measured_speedup >= MIN_SPEEDUP else "regression"
        if chained > self.own_speedup:
            kind = "enabler" if step.enabler else "kept"
            step.detail = (
                f"{kind}: {self.own_speedup:.2f}x on its own, {chained:.2f}x with the best step "
                f"built on it, credited {step.measured_speedup:.2f}x; {step.detail}"
            )[:500]


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
    plan: RolloutPlan, verified: list[VerifiedKernel], services: RolloutServices, phases: PhaseTimes
) -> tuple[VerifiedKernel, CheckResult | None]:
    """The fastest verified candidate that also passes compute-sanitizer (memcheck, and
    racecheck with shared memory): numbers that happen to match don't prove memory safety.
    Candidates that fail are recorded as rejected attempts from the original kernel. With it,
    the check of its sanitizer run (verified on fresh inputs and timed before the sanitizer
    ran, with the baselines): the best's final timing; None for the original."""
    origin, request = plan.origin, plan.request
    for candidate in sorted(verified, key=lambda p: p.time_ms):
        if candidate.time_ms >= origin.time_ms:
            break
        evaluation = services.evaluate(
            plan.source,
            candidate.source,
            None,
            request.settings,
            sanitize=True,
            profile=False,
        )
        phases.add(evaluation.phases)
        if evaluation.verified:
            return candidate, evaluation.check
        assert candidate.made_by is not None  # every candidate but the original has its step
        rejected = OptimizeStep(
            rollout=candidate.made_by.rollout,
            depth=candidate.made_by.depth,
            technique=candidate.made_by.technique,
            state_before=origin.state.state,
            predicted_speedup=1.0,
            outcome="rejected",
            detail=evaluation.feedback.message if evaluation.feedback else "",
            source_hash=code_hash(origin.source),
            candidate_hash=candidate.made_by.candidate_hash,
            error_kind="sanitizer",
            target_finding=_target_on(services.kb, candidate.made_by.technique, origin.state),
        )
        services.kb.record(kb_attempt(rejected, arch=origin.state.arch, kernel=request.kernel))
    return origin, None


def _measured(step: OptimizeStep) -> str:
    if step.measured_speedup is not None:
        return f"measured {step.measured_speedup:.2f}x ({step.outcome})"
    return f"{step.outcome}: {step.detail[:120]}"


def _known_state(
    client: LlmClient, kb: KnowledgeBase, state: PerfState, spent: OptimizeResult | RolloutResult
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
    spent.prompt_tokens += choice.usage.prompt_tokens
    spent.completion_tokens += choice.usage.completion_tokens
    if choice.source == "new":
        kb.ensure_state(choice.state, choice.rationale)
    return msgspec.structs.replace(state, state=choice.state)


def _proposed(
    plan: RolloutPlan,
    services: RolloutServices,
    current: VerifiedKernel,
    result: RolloutResult,
    asked: set[tuple[str, str]],
) -> list[str]:
    """The ids of new techniques proposed for `current`'s state when the KB has none left for
    it (agents/proposals.py), asked once per state and source in a rollout; [] otherwise."""
    key = (current.state.state, code_hash(current.source))
    if plan.request.proposals <= 0 or key in asked:
        return []
    with services.proposing:
        batch = propose_where_needed(
            services.client,
            services.kb,
            current.state,
            kernel=plan.request.kernel,
            source=current.source,
            limit=plan.request.proposals,
        )
    if batch is None:
        return []
    asked.add(key)
    result.prompt_tokens += batch.usage.prompt_tokens
    result.completion_tokens += batch.usage.completion_tokens
    result.proposals += batch.verdicts
    return batch.accepted


def _choose(
    kb: KnowledgeBase,
    state: PerfState,
    *,
    source_hash: str | None,
    k: int,
    forced: str | None,
    seed: int | None,
    temperature: float,
    exploration: float,
    offered: Collection[str] | None = None,
    kernel_hash: str | None = None,
    among: Sequence[str] = (),
    busy: Collection[str] = (),
    exhausted: Collection[str] = (),
    behind: float = 0.0,
) -> RankedTechnique | None:
    """What the step tries: `forced`, else a weighted random top-k pick among `among` (just
    proposed) when any of them is ranked, else among the ranking; only techniques in `offered`
    (None: every one), ranked with this kernel's (`kernel_hash`) own attempts first; `behind`:
    how far (log) this kernel is behind the fastest the run found (kb.ranking.select)."""
    ranked = kb.rank(state.arch, state.state, state.findings, source_hash=kernel_hash)
    visits = sum(r.kernel_attempts for r in ranked)  # on this kernel, failures included
    if offered is not None:
        ranked = [r for r in ranked if r.technique in offered]
    if forced is not None:
        match = next((r for r in ranked if r.technique == forced), None)
        if match is not None:
            return match
        # The user asked for it although the KB doesn't rank it for this state: honour that,
        # predicting the catalog prior.
        technique = kb.technique(forced)
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
                target_finding=_target_on(kb, forced, state),
            )
    ranked = [r for r in ranked if r.technique in among] or ranked
    if source_hash is not None:
        ranked = _untried_or_successful(kb, state, source_hash, ranked, exhausted)
    # What rollouts running alongside are trying on this kernel right now (agents/in_flight.py)
    ranked = [r for r in ranked if r.technique not in busy] or ranked
    picked = select(
        ranked,
        1,
        top_k=max(k, 1),
        temperature=temperature,
        exploration=exploration,
        visits=visits,
        behind=behind,
        seed=seed,
    )
    return picked[0] if picked else None


def _untried_or_successful(
    kb: KnowledgeBase,
    state: PerfState,
    source_hash: str,
    ranked: list[RankedTechnique],
    exhausted: Collection[str] = (),
) -> list[RankedTechnique]:
    """`ranked` without the techniques already tried on this very kernel (`source_hash`)
    without a success: the lowering agent has had its retries at each of them, so trying one
    again spends a step on what this kernel's own record says fails. Successes stay (a rollout
    from the original re-applies them to go deeper), unless each led to an `exhausted` kernel:
    re-applying one would re-derive a kernel with nothing left to try. When nothing is left
    here, the kernel is a dead end: the rollout goes back along its branch."""
    tried = kb.attempts(arch=state.arch, state=state.state, source_hash=source_hash)
    succeeded = {
        a.technique for a in tried if a.outcome == "success" and a.candidate_hash not in exhausted
    }
    failed = {a.technique for a in tried if a.outcome != "infrastructure"} - succeeded
    return [r for r in ranked if r.technique not in failed]


def _step(
    plan: RolloutPlan,
    services: RolloutServices,
    current: VerifiedKernel,
    choice: RankedTechnique,
    step: OptimizeStep,
) -> VerifiedKernel | None:
    """Lower `choice` onto `current`, evaluate and soft-verify the candidate; fills in `step`'s
    verdict and returns the verified candidate (None when the step produced none)."""
    request = plan.request
    evaluations: dict[str, Evaluation] = {}
    latest: list[Evaluation] = []  # in the order checked (a candidate may come back twice)
    clock = StepClock(step.phases)
    ncu_below_ms = _ncu_below_ms(current, choice, depth_left=step.depth + 1 < request.depth)

    def check(candidate: str) -> Feedback | None:
        clock.llm_answered()
        # No kernel name: the candidate's state is its dominant kernel's, whatever it is called.
        evaluation = services.evaluate(
            plan.source, candidate, None, request.settings, ncu_below_ms=ncu_below_ms
        )
        clock.evaluated(evaluation)
        clock.llm_waits()  # the lowering agent's next reply, if it asks for one
        evaluations[code_hash(candidate)] = evaluation
        latest.append(evaluation)
        if evaluation.error is not None:  # not the candidate's fault: stop retrying
            raise _HarnessUnavailable(evaluation.error.message)
        return evaluation.feedback

    def spend(usage: Usage) -> None:  # counted as spent, whatever ends the step
        step.prompt_tokens += usage.prompt_tokens
        step.completion_tokens += usage.completion_tokens

    technique = _technique(services.kb, choice)
    clock.llm_waits()
    try:
        lowered = services.lower(
            services.client,
            LoweringInput(
                source=current.source,
                kernel=current.state.kernel,  # the dominant kernel, under its current name
                state=current.state,
                technique=technique,
                notes=choice.notes,
                constraints=plan.constraints,
                entry_names=kept_functions(plan.target),
            ),
            check=check,
            on_usage=spend,
        )
    except LlmError as exc:
        _fatal(step, "LLM", exc)
        return None
    except _HarnessUnavailable as exc:
        _fatal(step, "harness", exc)
        return None
    finally:
        clock.llm_answered()
    if lowered.source is None:
        # "error" when no candidate ever reached the harness: every reply was unusable.
        step.outcome = latest[-1].outcome if latest else "error"
        step.error_kind = "unusable_reply" if step.outcome == "error" else None
        step.detail = "; ".join(lowered.failures)[-500:]
        return None
    evaluation = evaluations[code_hash(lowered.source)]
    try:
        with clock.llm("soft_verify"):
            verdict = soft_verify(
                services.client,
                reference_source=plan.reference_text,
                original_source=current.source,
                candidate_source=lowered.source,
                constraints=plan.constraints,
            )
    except LlmError as exc:
        _fatal(step, "LLM", exc)
        return None
    spend(verdict.usage)
    if not verdict.ok:
        step.outcome = "rejected"
        step.detail = "soft verification: " + "; ".join(verdict.reasons)
        return None
    assert evaluation.time_ms is not None
    step.measured_speedup = current.time_ms / evaluation.time_ms
    step.outcome = "success" if step.measured_speedup >= MIN_SPEEDUP else "regression"
    step.detail = (
        evaluation.check.verify.message if evaluation.check and evaluation.check.verify else ""
    )
    state = evaluation.state or current.state
    step.state_after = state.state
    step.kernels_after = evaluation.kernels
    step.candidate_hash = code_hash(lowered.source)
    return VerifiedKernel(
        source=lowered.source,
        time_ms=evaluation.time_ms,
        state=state,
        kernels=evaluation.kernels,
        techniques=[*current.techniques, choice.technique],
        made_by=step,
    )


def _ncu_below_ms(
    current: VerifiedKernel, choice: RankedTechnique, *, depth_left: bool
) -> float | None:
    """Below what time a candidate of this step gets ncu's pass after its in-process state
    (WorkerRequest.ncu_below_ms): only a candidate the rollout goes on from needs ncu's rules
    and source lines, for its next choice and its lowering prompt. That is a candidate that
    beats `current` by MIN_SPEEDUP, or any verified one of an enabler, while depth is left;
    the others' states are only recorded, and the in-process counters classify the same."""
    if not depth_left:
        return 0.0
    if _enables(choice.technique):
        return None
    return current.time_ms / MIN_SPEEDUP


def _fatal(step: OptimizeStep, what: str, exc: Exception) -> None:
    """The LLM or the harness is unavailable: the step ends as an infrastructure failure (not
    the technique's: the KB's statistics ignore it), and so does the run."""
    step.outcome = "infrastructure"
    step.detail, step.error_kind, step.fatal = f"{what}: {exc}", what, True


class _HarnessUnavailable(Exception):
    pass


def _target_on(kb: KnowledgeBase, technique: str, state: PerfState) -> str:
    """The finding of `state` that `technique` is aimed at (kb.ranking.target_finding); none
    for a technique the KB has no catalog entry for."""
    known = kb.technique(technique)
    return target_finding(known, finding_gains(state.findings)) if known else NO_TARGET


def _technique(kb: KnowledgeBase, choice: RankedTechnique) -> Technique:
    """The catalog entry of a ranked technique; a learned one (not in the catalog) is described
    by its title, which is all the KB knows of it."""
    return kb.technique(choice.technique) or Technique(
        id=choice.technique,
        category="learned",
        title=choice.title,
        description=choice.title,
        how_to_apply=choice.explanation or choice.title,
    )


def kb_attempt(step: OptimizeStep, *, arch: str, kernel: str) -> Attempt:
    """The KB's replay-buffer row for `step`, recorded as it happens."""
    if not is_outcome(step.outcome):  # the loop sets only Attempt outcomes
        raise ValueError(f"step outcome {step.outcome!r} is not a KB attempt outcome")
    return Attempt(
        id=uuid.uuid4().hex,
        time=time.time(),
        arch=arch,
        kernel=kernel,
        source_hash=step.source_hash,
        candidate_hash=step.candidate_hash,
        before_state=step.state_before,
        after_state=step.state_after,
        technique=step.technique,
        predicted_speedup=step.predicted_speedup,
        measured_speedup=step.measured_speedup,
        outcome=step.outcome,
        correctness_detail=step.detail[:500],
        prompt_tokens=step.prompt_tokens,
        completion_tokens=step.completion_tokens,
        error_kind=step.error_kind,
        target_finding=step.target_finding,
    )


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
