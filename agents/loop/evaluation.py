"""Evaluating a candidate through the harness worker: build, verify, time, re-profile, re-classify,
into what the loop needs (Feedback for the lowering agent, or the time and new state). Every
kernel the file defines is profiled, whatever the rewrite named them; the state is the dominant
kernel's by GPU time, with a `kernel_chain` finding when others take a real share."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from kernelblaster.agents.llm.lowering import Feedback
from kernelblaster.harness.analysis.classify import kernel_states, launch_durations
from kernelblaster.harness.analysis.findings import with_kernel_chain
from kernelblaster.harness.protocol.optimize_protocol import LaunchedKernel, PhaseTimes
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    PerfState,
    ProfileDepth,
    ProfileReport,
)
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import Settings

# The failures that are both an Attempt outcome (kb.records.Outcome) and a lowering feedback kind
# (agents.lowering.FailureKind).
ErrorOutcome = Literal["compile_error", "timeout", "crash", "wrong_result"]
# Worker error kinds → the attempt outcome the KB records and the lowering feedback kind.
_ERROR_OUTCOMES: dict[str, ErrorOutcome] = {
    "build_failed": "compile_error",
    "timeout": "timeout",
    "illegal_memory_access": "crash",
    "crash": "crash",
    "shape_mismatch": "wrong_result",
    "entry_missing": "compile_error",
}
# Error kinds that, once the candidate verified and was timed, can only come from the profiler.
_PROFILER_FAULTS = frozenset({"timeout", "crash"})


class Evaluation(msgspec.Struct, kw_only=True):
    outcome: str  # "verified", or an Attempt outcome for a failure
    feedback: Feedback | None = None
    check: CheckResult | None = None
    profile: ProfileReport | None = None
    state: PerfState | None = None  # the dominant kernel's (or the one asked for, see evaluate)
    kernels: list[LaunchedKernel] = []  # every profiled kernel, dominant first
    time_ms: float | None = None
    error: HarnessError | None = None  # a failure not caused by the candidate (no GPU, ncu)
    # The worker's parts of it (`harness_phases`); the caller adds its wall time and queueing
    phases: PhaseTimes = msgspec.field(default_factory=PhaseTimes)

    @property
    def verified(self) -> bool:
        return self.outcome == "verified"


def _build_log(build: BuildResult) -> str:
    return "\n".join(
        f"line {d.line}: {d.severity}: {d.message}"
        for d in build.diagnostics
        if d.severity in ("error", "warning")
    )


def launched_kernels(
    profile: ProfileReport, states: list[PerfState]
) -> list[tuple[LaunchedKernel, PerfState]]:
    """Each profiled kernel with its share of the GPU time and the state of its longest launch,
    the dominant kernel (most GPU time over all its launches) first. `states` are the worker's,
    one per launch in `profile.kernels` order. Without durations every launch counts the same."""
    durations = launch_durations(profile)
    total = sum(durations)
    time_by_name: dict[str, float] = {}
    launches_by_name: dict[str, int] = {}
    for duration, state in zip(durations, states, strict=True):
        time_by_name[state.kernel] = time_by_name.get(state.kernel, 0.0) + duration
        launches_by_name[state.kernel] = launches_by_name.get(state.kernel, 0) + 1
    kernels = [
        (
            LaunchedKernel(
                name=name,
                time_share=time_by_name[name] / total,
                state=longest.state,
                launches=launches_by_name[name],
            ),
            longest,
        )
        for name, longest in kernel_states(profile, states).items()
    ]
    return sorted(kernels, key=lambda pair: -pair[0].time_share)


def evaluate(
    source: Path,
    text: str,
    kernel: str | None,
    settings: Settings,
    *,
    depth: ProfileDepth = "quick",
    sanitize: bool = False,
    profile: bool = True,
    ncu_below_ms: float | None = None,
    baselines: bool = True,
) -> Evaluation:
    """`kernel`: whose state to take when the text launches it (the original kernel the user
    chose); None, or a kernel it no longer launches, takes the dominant one. `ncu_below_ms`:
    WorkerRequest's (ncu's pass after the in-process state only for a kernel faster than it);
    `baselines`: WorkerRequest's (False where they are measured apart,
    agents/kernelbench/baselines.py)."""
    request = WorkerRequest(
        task="profile" if profile else "check",
        source=str(source),
        source_text=text,
        settings=settings,
        depth=depth,
        kernels=[],  # all the kernels the text defines, whatever their names
        sanitize=sanitize,
        ncu_below_ms=ncu_below_ms,
        baselines=baselines,
    )
    return evaluation_of(run_harness_sync(request, settings), kernel)


# CheckResult.phase_seconds' parts of the reference side (harness/target/reference_side.py),
# when the check made it itself: they are then inside its "load".
_REFERENCE_PARTS = (
    "reference_load",
    "reference_probe",
    "reference_sets",
    "reference_checks_loaded",
)


# CheckResult.phase_seconds entries that are not seconds spent in the run: a spare's age when
# its request came
_NOT_PARTS = frozenset({"spare_age"})


def harness_phases(response: WorkerResponse) -> PhaseTimes:
    """The worker's own measurements of a run, by phase. The reference side is made beside the
    build (its time after the build's end counts, `reference_after_build`), or ahead by a spare
    worker (the wait for it counts, `reference_wait`), or in the check ("load" holds it, with
    the candidate's load, which counts as verification)."""
    seconds = response.check.phase_seconds if response.check is not None else {}
    profile = response.profile
    ncu_parts = profile.phase_seconds if profile and profile.program != "in_process" else {}
    in_load = 0.0  # the reference side's share of "load"
    if "reference_after_build" in seconds:
        reference = seconds["reference_after_build"]
    elif "reference_wait" in seconds:
        reference = seconds["reference_wait"]
    else:
        reference = in_load = sum(seconds.get(part, 0.0) for part in _REFERENCE_PARTS)
    return PhaseTimes(
        build=response.build.seconds if response.build is not None else 0.0,
        reference=reference,
        verify=seconds.get("verify", 0.0) + max(0.0, seconds.get("load", 0.0) - in_load),
        timing=seconds.get("time", 0.0),
        quick_profile=seconds.get("profile_counters", 0.0),
        full_profile=seconds.get("profile_ncu", 0.0),
        baselines=seconds.get("baselines", 0.0),
        sanitize=seconds.get("sanitize", 0.0),
        parts={name: s for name, s in seconds.items() if name not in _NOT_PARTS} | ncu_parts,
    )


def evaluation_of(response: WorkerResponse, kernel: str | None) -> Evaluation:
    """The loop's verdict on one worker response (see `evaluate` for `kernel`)."""
    evaluation = _verdict(response, kernel)
    evaluation.phases = harness_phases(response)
    return evaluation


def _verdict(response: WorkerResponse, kernel: str | None) -> Evaluation:
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
        # The environment, not the candidate: no GPU, ncu permissions... Or ncu itself running
        # past its limit or dying without a report on a candidate that had just verified and
        # been timed: the candidate ran correctly, the profiler is what failed.
        profiler_failed = error.kind in _PROFILER_FAULTS and check is not None and check.timing
        if outcome is None or profiler_failed:
            return Evaluation(outcome="error", error=error, check=check)
        return Evaluation(
            outcome=outcome,
            # The outcomes in _ERROR_OUTCOMES are also lowering feedback kinds.
            feedback=Feedback(kind=outcome, message=f"{error.message}\n{error.log}".strip()),
            check=check,
        )
    assert check is not None and check.timing is not None
    launched = launched_kernels(response.profile, response.states) if response.profile else []
    named = next((state for info, state in launched if info.name == kernel), None)
    dominant = launched[0][1] if launched else None
    state = named or dominant
    if state is not None:  # the ranking's cue for fusion: what else the candidate launches
        state = with_kernel_chain(state, [info.time_share for info, _ in launched])
    return Evaluation(
        outcome="verified",
        check=check,
        profile=response.profile,
        state=state,
        kernels=[info for info, _ in launched],
        time_ms=check.timing.median_ms,
    )
