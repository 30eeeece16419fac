"""Exact per-entry statistics: outcome counts and Welford's running mean/variance of
log(measured speedup). The store folds one attempt at a time on `record`, and refolds an
entry from its attempts on merge, with the same function, so both give the same numbers."""

from __future__ import annotations

import math

import msgspec

from kernelblaster.kb.records import FAILED_OUTCOMES, UNRECORDED_TARGET, Attempt


class EntryCounts(msgspec.Struct):  # positional too: rows are built from SQL tuples
    attempts: int = 0
    successes: int = 0
    regressions: int = 0
    failures: int = 0
    n_measured: int = 0  # verified attempts with a measured speedup
    mean_log_speedup: float = 0.0
    m2_log_speedup: float = 0.0  # Welford's sum of squared deviations

    @property
    def verified(self) -> int:
        return self.successes + self.regressions

    @property
    def var_log_speedup(self) -> float | None:
        return self.m2_log_speedup / (self.n_measured - 1) if self.n_measured > 1 else None


def fold(counts: EntryCounts, attempt: Attempt) -> None:
    """Add one attempt to `counts` in place. An infrastructure failure says nothing about the
    technique: it is not counted at all."""
    if attempt.outcome == "infrastructure":
        return
    counts.attempts += 1
    if attempt.outcome == "success":
        counts.successes += 1
    elif attempt.outcome == "regression":
        counts.regressions += 1
    elif attempt.outcome in FAILED_OUTCOMES:
        counts.failures += 1
    if attempt.outcome in ("success", "regression") and attempt.measured_speedup is not None:
        value = math.log(attempt.measured_speedup)
        counts.n_measured += 1
        delta = value - counts.mean_log_speedup
        counts.mean_log_speedup += delta / counts.n_measured
        counts.m2_log_speedup += delta * (value - counts.mean_log_speedup)


def validate_attempt(attempt: Attempt) -> None:
    """Reject attempts that would poison the statistics, saying which field is wrong."""
    for name in ("id", "arch", "kernel", "before_state", "technique"):
        if not getattr(attempt, name).strip():
            raise ValueError(f"attempt {attempt.id!r}: {name} must not be empty")
    for name in ("predicted_speedup", "measured_speedup"):
        value = getattr(attempt, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"attempt {attempt.id}: {name} must be a positive number, got {value}")
    if attempt.outcome in FAILED_OUTCOMES and attempt.measured_speedup is not None:
        raise ValueError(
            f"attempt {attempt.id}: outcome {attempt.outcome} can't have a measured speedup "
            "(only verified candidates are timed)"
        )
    if attempt.target_finding == UNRECORDED_TARGET:
        raise ValueError(
            f"attempt {attempt.id}: target_finding {UNRECORDED_TARGET!r} is reserved; leave it "
            "null when the kernel's finding is not known"
        )
    if attempt.prompt_tokens < 0 or attempt.completion_tokens < 0:
        raise ValueError(f"attempt {attempt.id}: token counts must not be negative")
