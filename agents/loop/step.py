"""One step: the lowering agent applies the chosen technique, the harness builds, verifies, times
and re-profiles each candidate (its feedback goes back to the LLM), and soft verification reviews
the verified one; the verdict is the measured speedup. A failure of the LLM or the harness ends
the step and the run as "infrastructure": it says nothing about the technique."""

from __future__ import annotations

import functools

from kernelblaster.agents.llm.client import LlmError, Usage
from kernelblaster.agents.llm.lowering import Feedback, LoweringInput
from kernelblaster.agents.llm.soft_verify import soft_verify
from kernelblaster.agents.loop.choice import catalog_entry
from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.agents.loop.plan import MIN_SPEEDUP, RolloutPlan, RolloutServices, VerifiedKernel
from kernelblaster.agents.loop.step_clock import StepClock
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeStep,
)
from kernelblaster.harness.target.targets import kept_functions
from kernelblaster.kb.catalog import enablers
from kernelblaster.kb.records import (
    RankedTechnique,
    code_hash,
)


def run_step(
    plan: RolloutPlan,
    services: RolloutServices,
    current: VerifiedKernel,
    choice: RankedTechnique,
    step: OptimizeStep,
) -> VerifiedKernel | None:
    """Lower `choice` onto `current`, evaluate and soft-verify the candidate; fills in `step`'s
    verdict and returns the verified candidate (None when the step produced none)."""
    clock = StepClock(step.phases)
    depth_left = step.depth + 1 < plan.request.depth
    candidates = _Candidates(
        plan, services, clock, ncu_pass_below_ms(current, choice, depth_left=depth_left)
    )
    lowered = _lower(plan, services, current, choice, step, candidates, clock)
    if lowered is None:
        return None
    evaluation = candidates.of(lowered)
    if not _soft_verified(plan, services, current, lowered, step, clock):
        return None
    return _judged(current, choice, step, lowered, evaluation)


class _Candidates:
    """The harness's evaluation of each candidate the lowering agent proposes in one step: its
    feedback goes back to the LLM; a failure of the harness itself stops the retries."""

    def __init__(
        self,
        plan: RolloutPlan,
        services: RolloutServices,
        clock: StepClock,
        ncu_below_ms: float | None,
    ) -> None:
        self._plan, self._services, self._clock = plan, services, clock
        self._ncu_below_ms = ncu_below_ms
        self._by_hash: dict[str, Evaluation] = {}
        self.latest: list[Evaluation] = []  # in the order checked (one may come back twice)

    def check(self, candidate: str) -> Feedback | None:
        clock, plan = self._clock, self._plan
        clock.llm_answered()
        # No kernel name: the candidate's state is its dominant kernel's, whatever it is called.
        evaluation = self._services.evaluate(
            plan.source, candidate, None, plan.request.settings, ncu_below_ms=self._ncu_below_ms
        )
        clock.evaluated(evaluation)
        clock.llm_waits()  # the lowering agent's next reply, if it asks for one
        self._by_hash[code_hash(candidate)] = evaluation
        self.latest.append(evaluation)
        if evaluation.error is not None:  # not the candidate's fault: stop retrying
            raise _HarnessUnavailable(evaluation.error.message)
        return evaluation.feedback

    def of(self, source: str) -> Evaluation:
        return self._by_hash[code_hash(source)]


def _spend(step: OptimizeStep, usage: Usage) -> None:
    """Tokens counted as spent, whatever ends the step."""
    step.prompt_tokens += usage.prompt_tokens
    step.completion_tokens += usage.completion_tokens


def _lower(
    plan: RolloutPlan,
    services: RolloutServices,
    current: VerifiedKernel,
    choice: RankedTechnique,
    step: OptimizeStep,
    candidates: _Candidates,
    clock: StepClock,
) -> str | None:
    """The lowering agent's verified candidate, or None with `step`'s outcome said."""
    technique = catalog_entry(services.kb, choice)
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
            check=candidates.check,
            on_usage=functools.partial(_spend, step),
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
        step.outcome = candidates.latest[-1].outcome if candidates.latest else "error"
        step.error_kind = "unusable_reply" if step.outcome == "error" else None
        step.detail = "; ".join(lowered.failures)[-500:]
        return None
    return lowered.source


def _soft_verified(
    plan: RolloutPlan,
    services: RolloutServices,
    current: VerifiedKernel,
    candidate: str,
    step: OptimizeStep,
    clock: StepClock,
) -> bool:
    """Whether soft verification (an LLM's review against the reference) accepts `candidate`;
    if not, `step` says why."""
    try:
        with clock.llm("soft_verify"):
            verdict = soft_verify(
                services.client,
                reference_source=plan.reference_text,
                original_source=current.source,
                candidate_source=candidate,
                constraints=plan.constraints,
            )
    except LlmError as exc:
        _fatal(step, "LLM", exc)
        return False
    _spend(step, verdict.usage)
    if not verdict.ok:
        step.outcome = "rejected"
        step.detail = "soft verification: " + "; ".join(verdict.reasons)
        return False
    return True


def _judged(
    current: VerifiedKernel,
    choice: RankedTechnique,
    step: OptimizeStep,
    candidate: str,
    evaluation: Evaluation,
) -> VerifiedKernel:
    """The verified candidate; `step`'s verdict is its speedup over `current`."""
    assert evaluation.time_ms is not None
    step.measured_speedup = current.time_ms / evaluation.time_ms
    step.outcome = "success" if step.measured_speedup >= MIN_SPEEDUP else "regression"
    step.detail = (
        evaluation.check.verify.message if evaluation.check and evaluation.check.verify else ""
    )
    state = evaluation.state or current.state
    step.state_after = state.state
    step.kernels_after = evaluation.kernels
    step.candidate_hash = code_hash(candidate)
    return VerifiedKernel(
        source=candidate,
        time_ms=evaluation.time_ms,
        state=state,
        kernels=evaluation.kernels,
        techniques=[*current.techniques, choice.technique],
        made_by=step,
    )


def ncu_pass_below_ms(
    current: VerifiedKernel, choice: RankedTechnique, *, depth_left: bool
) -> float | None:
    """Below what time a candidate of this step gets ncu's pass after its in-process state: only one
    the rollout goes on from needs ncu's rules and source lines (it beats `current` by
    MIN_SPEEDUP, or is an enabler's, while depth is left); the others' states are only recorded."""
    if not depth_left:
        return 0.0
    if enables(choice.technique):
        return None
    return current.time_ms / MIN_SPEEDUP


def _fatal(step: OptimizeStep, what: str, exc: Exception) -> None:
    """The LLM or the harness is unavailable: the step ends as an infrastructure failure (not
    the technique's: the KB's statistics ignore it), and so does the run."""
    step.outcome = "infrastructure"
    step.detail, step.error_kind, step.fatal = f"{what}: {exc}", what, True


class _HarnessUnavailable(Exception):
    pass


def enables(technique: str) -> bool:
    return technique in enablers()
