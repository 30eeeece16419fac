"""Evaluating a candidate source through the harness worker: build, verify, time, re-profile and
re-classify. The result is what the loop needs: a verdict the lowering agent can act on
(Feedback), or the candidate's time and new state."""

from __future__ import annotations

from pathlib import Path

import msgspec

from kernelblaster.agents.lowering import Feedback
from kernelblaster.harness.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    PerfState,
    ProfileReport,
)
from kernelblaster.harness.worker_client import run_harness_sync
from kernelblaster.harness.worker_protocol import WorkerRequest
from kernelblaster.settings import Settings

# Worker error kinds → the attempt outcome the KB records and the lowering feedback kind.
_ERROR_OUTCOMES = {
    "build_failed": "compile_error",
    "timeout": "timeout",
    "illegal_memory_access": "crash",
    "crash": "crash",
    "shape_mismatch": "wrong_result",
    "entry_missing": "compile_error",
}


class Evaluation(msgspec.Struct, kw_only=True):
    outcome: str  # "verified", or an Attempt outcome for a failure
    feedback: Feedback | None = None
    check: CheckResult | None = None
    profile: ProfileReport | None = None
    state: PerfState | None = None
    time_ms: float | None = None
    error: HarnessError | None = None  # a failure not caused by the candidate (no GPU, ncu)

    @property
    def verified(self) -> bool:
        return self.outcome == "verified"


def _build_log(build: BuildResult) -> str:
    return "\n".join(
        f"line {d.line}: {d.severity}: {d.message}"
        for d in build.diagnostics
        if d.severity in ("error", "warning")
    )


def evaluate(
    source: Path,
    text: str,
    kernel: str,
    settings: Settings,
    *,
    depth: str = "quick",
    sanitize: bool = False,
    profile: bool = True,
) -> Evaluation:
    request = WorkerRequest(
        task="profile" if profile else "check",
        source=str(source),
        source_text=text,
        settings=msgspec.to_builtins(settings),
        depth=depth,
        kernels=[kernel],
        sanitize=sanitize,
    )
    response = run_harness_sync(request, settings)
    if response.build is not None and not response.build.ok:
        return Evaluation(
            outcome="compile_error",
            feedback=Feedback(kind="compile_error", message=_build_log(response.build)),
        )
    check = response.check
    if check is not None and check.verify is not None and not check.verify.ok:
        hacked = bool(check.verify.hacks)
        return Evaluation(
            outcome="rejected" if hacked else "wrong_result",
            feedback=Feedback(
                kind="hack" if hacked else "wrong_result", message=check.verify.message
            ),
            check=check,
        )
    error = response.error
    if error is not None:
        outcome = _ERROR_OUTCOMES.get(error.kind)
        if outcome is None:  # the environment, not the candidate: no GPU, ncu permissions...
            return Evaluation(outcome="error", error=error, check=check)
        return Evaluation(
            outcome=outcome,
            # The outcomes in _ERROR_OUTCOMES are also lowering feedback kinds.
            feedback=Feedback(kind=outcome, message=f"{error.message}\n{error.log}".strip()),
            check=check,
        )
    assert check is not None and check.timing is not None
    state = next((state for state in response.states if state.kernel == kernel), None)
    return Evaluation(
        outcome="verified",
        check=check,
        profile=response.profile,
        state=state,
        time_ms=check.timing.median_ms,
    )
