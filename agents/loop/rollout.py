"""One rollout: up to `depth` steps from the original kernel, each attempt recorded in the KB as it
happens, so a cancelled run keeps what it learned and concurrent rollouts rank with it. A step is
kept when it verified and beat its start by MIN_SPEEDUP, or is a verified enabler with depth
left; it is credited with what it enabled (`credited_speedup`). A dead end ends its branch, not
the rollout."""

from __future__ import annotations

import functools
import time
import uuid

from kernelblaster.agents.loop.choice import choose, known_state, proposed_techniques
from kernelblaster.agents.loop.plan import (
    CHAIN_DISCOUNT,
    MIN_SPEEDUP,
    RolloutPlan,
    RolloutResult,
    RolloutServices,
    VerifiedKernel,
)
from kernelblaster.agents.loop.step import enables, run_step
from kernelblaster.agents.loop.step_clock import StepClock
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeStep,
)
from kernelblaster.kb.records import Attempt, RankedTechnique, code_hash, is_outcome


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
    walk = _Rollout(plan, rollout, services)
    for step_index in range(plan.request.depth):
        if services.cancelled():
            walk.result.cancelled = True
            break
        choice = walk.choose(step_index)
        if choice is None:
            if walk.current.state.near_limit:
                services.report(f"rollout {rollout + 1}: at the roof, stopping", None)
            break
        step = walk.step(step_index, choice)
        candidate = run_step(plan, services, walk.current, choice, step)
        improved = walk.settle(step, candidate)
        if step.fatal:
            walk.result.error = step.detail
            break
        walk.advance(step, improved)
    return walk.finish()


class _Rollout:
    """Where one rollout stands: its current kernel and the branch that led to it, its result
    so far, the kept steps still to be credited, and the proposals it asked for."""

    def __init__(self, plan: RolloutPlan, rollout: int, services: RolloutServices) -> None:
        self.plan, self.rollout, self.services = plan, rollout, services
        self.result = RolloutResult(rollout=rollout)
        self.current = plan.origin
        self.path = [plan.origin]  # the kernels of the branch, the original first
        # kept steps with depth left, credited when their branch ends: pending[i] made path[i + 1]
        self.pending: list[_KeptStep] = []
        self.asked: set[tuple[str, str]] = set()  # (state, source hash) proposals were asked for

    def choose(self, step_index: int) -> RankedTechnique | None:
        """The technique the step tries (agents/loop/choice.py), counted as in flight. At a
        dead end the branch ends: back along it, its last kept step credited, to the kernel it
        came from (backtracking); None when the original is a dead end too."""
        choice = self._choice_on(step_index)
        while choice is None and len(self.path) > 1:
            self.path.pop()
            self._credit([self.pending.pop()])
            self.current = self.path[-1]
            choice = self._choice_on(step_index)
        return choice

    def _choice_on(self, step_index: int) -> RankedTechnique | None:
        """What the step tries on the current kernel; None when nothing is left to try there
        (at its roof, or every technique failed), which marks it exhausted."""
        plan, services, current, request = self.plan, self.services, self.current, self.plan.request
        starting_hash = code_hash(current.source)
        if current.state.near_limit:
            services.search.exhausted.add(starting_hash)
            return None
        forced = request.technique if (self.rollout == 0 and step_index == 0) else None
        proposed = (
            [] if forced else proposed_techniques(plan, services, current, self.result, self.asked)
        )
        seed = request.seed
        step_seed = None if seed is None else seed + self.rollout * request.depth + step_index + 1
        choice = services.in_flight.choose(
            starting_hash,
            functools.partial(
                choose,
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

    def step(self, step_index: int, choice: RankedTechnique) -> OptimizeStep:
        return OptimizeStep(
            rollout=self.rollout,
            depth=step_index,
            technique=choice.technique,
            state_before=self.current.state.state,
            predicted_speedup=choice.predicted_speedup,
            outcome="error",
            source_hash=code_hash(self.current.source),
            target_finding=choice.target_finding,
        )

    def settle(self, step: OptimizeStep, candidate: VerifiedKernel | None) -> VerifiedKernel | None:
        """The step counted, and kept (to be credited later) or recorded in the KB now; its
        candidate when it is faster (verified and a success). An enabler kept is built on."""
        services, result = self.services, self.result
        if candidate is not None:
            candidate.state = known_state(services.client, services.kb, candidate.state, result)
            step.state_after = candidate.state.state
        result.steps.append(step)
        result.prompt_tokens += step.prompt_tokens
        result.completion_tokens += step.completion_tokens
        if candidate is not None:
            services.search.verified(candidate.time_ms)
            for earlier in self.pending:
                earlier.reached(candidate.time_ms)
        improved = candidate if candidate is not None and step.outcome == "success" else None
        depth_left = step.depth + 1 < self.plan.request.depth
        enabler = candidate is not None and improved is None and enables(step.technique)
        if candidate is not None and depth_left and (improved is not None or enabler):
            step.enabler = enabler
            self.pending.append(_KeptStep(step, self.current.time_ms, candidate.time_ms))
            self.path.append(candidate)
            if enabler:
                self.current = candidate
        else:
            _record(self.plan, services, result, step)
        services.in_flight.done(step.source_hash, step.technique)
        return improved

    def advance(self, step: OptimizeStep, improved: VerifiedKernel | None) -> None:
        """On from the faster candidate, if any; the step reported."""
        if improved is not None:
            self.current = improved
            self.result.verified.append(improved)
        self.services.report(
            f"rollout {self.rollout + 1} step {step.depth + 1}: {step.technique} predicted "
            f"{step.predicted_speedup:.2f}x, {_measured(step)}",
            improved.time_ms if improved is not None else None,
        )

    def finish(self) -> RolloutResult:
        """The kept steps of the branch it ended on credited, and recorded."""
        self._credit(self.pending)
        return self.result

    def _credit(self, kept_steps: list[_KeptStep]) -> None:
        """Record kept steps of a branch that ended, each credited with what it reached."""
        for kept in kept_steps:
            kept.judge()
            _record(self.plan, self.services, self.result, kept.step)
        kept_steps.clear()


def _record(
    plan: RolloutPlan, services: RolloutServices, result: RolloutResult, step: OptimizeStep
) -> None:
    attempt = kb_attempt(step, arch=plan.origin.state.arch, kernel=plan.request.kernel)
    with StepClock(step.phases).timed("kb_write"):
        services.kb.record(attempt)
    result.attempts.append(attempt)


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


def _measured(step: OptimizeStep) -> str:
    if step.measured_speedup is not None:
        return f"measured {step.measured_speedup:.2f}x ({step.outcome})"
    return f"{step.outcome}: {step.detail[:120]}"
