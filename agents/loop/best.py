"""The run's best candidate: the fastest verified one that also passes compute-sanitizer
(numbers that happen to match don't prove memory safety). A candidate the sanitizer finds
memory errors in is passed over and recorded as rejected; one it could not check, for a reason
not the candidate's, is adopted and marked unchecked."""

from __future__ import annotations

from kernelblaster.agents.loop.choice import target_on
from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.agents.loop.plan import RolloutPlan, RolloutServices, VerifiedKernel
from kernelblaster.agents.loop.rollout import kb_attempt
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeResult,
    OptimizeStep,
    PassedOver,
)
from kernelblaster.harness.protocol.records import CheckResult, SanitizerRun
from kernelblaster.kb.records import (
    code_hash,
)


def memory_safe_best(
    plan: RolloutPlan,
    verified: list[VerifiedKernel],
    services: RolloutServices,
    result: OptimizeResult,
) -> tuple[VerifiedKernel, CheckResult | None]:
    """The fastest verified candidate that also passes compute-sanitizer: matching numbers don't
    prove memory safety. One the sanitizer rejects is recorded as a rejected attempt and named in
    `result.passed_over`; one it could not check for a reason of the machine is adopted, with
    `result.sanitizer` saying so, and the KB learns nothing of it. Returned with its sanitizer
    run's check, the best's final timing (None for the original or an unfinished check)."""
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
        result.phases.add(evaluation.phases)
        check = evaluation.check
        if evaluation.verified:
            result.sanitizer = check.sanitizer if check is not None else None
            return candidate, check
        if evaluation.error is not None:
            result.sanitizer = _not_checked(evaluation)
            return candidate, check if check is not None and _checked(check) else None
        assert candidate.made_by is not None  # every candidate but the original has its step
        made_by = candidate.made_by
        sanitized = check.sanitizer if check is not None else None
        found = sanitized.summary if sanitized and sanitized.status == "failed" else None
        reason = found or (
            "failed its final check on fresh inputs: "
            + (evaluation.feedback.message if evaluation.feedback else evaluation.outcome)
        )
        result.passed_over.append(
            PassedOver(
                rollout=made_by.rollout,
                depth=made_by.depth,
                technique=made_by.technique,
                time_ms=candidate.time_ms,
                speedup=origin.time_ms / candidate.time_ms,
                reason=reason[:500],
            )
        )
        rejected = OptimizeStep(
            rollout=made_by.rollout,
            depth=made_by.depth,
            technique=made_by.technique,
            state_before=origin.state.state,
            predicted_speedup=1.0,
            outcome=evaluation.outcome,
            detail=reason,
            source_hash=code_hash(origin.source),
            candidate_hash=made_by.candidate_hash,
            error_kind="sanitizer" if found else "final_check",
            target_finding=target_on(services.kb, made_by.technique, origin.state),
        )
        services.kb.record(kb_attempt(rejected, arch=origin.state.arch, kernel=request.kernel))
    return origin, None


def _checked(check: CheckResult) -> bool:
    """Verified on fresh inputs and timed: a final timing, whatever stopped the run after."""
    return check.timing is not None and check.verify is not None and check.verify.ok


def _not_checked(evaluation: Evaluation) -> SanitizerRun:
    """What a sanitizer evaluation that failed for a reason not the candidate's says: the
    sanitizer's own record where it ran as far as that, else the error that stopped it."""
    check, error = evaluation.check, evaluation.error
    assert error is not None
    if check is not None and check.sanitizer is not None and check.sanitizer.status == "not_run":
        return check.sanitizer
    return SanitizerRun(status="not_run", reason=error.message, fix=error.fix)
