"""Policy update, the "textual gradient": PolicyEvaluation (predicted against measured speedups per
state, technique and target finding) → PerfGapAnalysis (the LLM says why they differ) →
ParameterUpdate (new KB notes and priors). Each proposal is validated on its own before it is
written. Only notes and priors are touched: the KB recomputes its statistics from attempts."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Annotated, Protocol

import msgspec

from kernelblaster.agents.llm.client import LlmClient, Usage
from kernelblaster.agents.llm.prompting import render_messages
from kernelblaster.agents.llm.reply_json import RejectedItem, ask_json, text_problem, validate_items
from kernelblaster.kb.ranking import kernels_described
from kernelblaster.kb.records import VERIFIED_OUTCOMES, Attempt, EntryStats, target_of

MAX_NOTE_CHARS = 300
MIN_PRIOR, MAX_PRIOR = 0.5, 10.0
MAX_GROUPS = 12  # groups shown to the LLM, largest evidence of a gap first


class PolicyStore(Protocol):
    """The part of kernelblaster.kb's KnowledgeBase the update uses."""

    def entry(self, arch: str, state: str, technique: str) -> EntryStats | None: ...
    def add_note(self, arch: str, state: str, technique: str, note: str) -> object: ...
    def set_prior(
        self, arch: str, state: str, technique: str, predicted_speedup: float, reason: str
    ) -> object: ...


class GroupEvaluation(msgspec.Struct, kw_only=True, frozen=True):
    state: str
    technique: str
    attempts: int
    outcomes: dict[str, int]  # outcome -> count
    predicted_speedup: float  # geometric mean of what was predicted when chosen
    measured_speedup: float | None  # geometric mean over verified, timed attempts
    log_gap: float | None  # mean of log(measured / predicted) over those attempts
    # geometric mean measured speedup per target finding (kb.records.target_of)
    measured_by_finding: dict[str, float]
    kb_predicted_speedup: float | None  # the KB's prediction now
    notes: list[str]  # the entry's current notes
    kernels: list[str]


class GapAnalysis(msgspec.Struct, kw_only=True, frozen=True):
    state: str
    technique: str
    explanation: str


class ParameterUpdate(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    state: str
    technique: str
    note: Annotated[str, msgspec.Meta(max_length=MAX_NOTE_CHARS)] | None = None
    prior_speedup: Annotated[float, msgspec.Meta(ge=MIN_PRIOR, le=MAX_PRIOR)] | None = None
    reason: Annotated[str, msgspec.Meta(max_length=MAX_NOTE_CHARS)] = ""


class PolicyUpdateResult(msgspec.Struct, kw_only=True):
    evaluation: list[GroupEvaluation]
    analyses: list[GapAnalysis] = []
    applied: list[ParameterUpdate] = []
    rejected: list[RejectedItem] = []
    usage: Usage = Usage()
    error: str | None = None  # why the LLM stages did not complete (evaluation still holds)


class _GapReply(msgspec.Struct):
    analyses: list[GapAnalysis]


class _UpdateReply(msgspec.Struct):
    updates: list[msgspec.Raw]  # each validated on its own, so one bad item drops only itself


def evaluate_policy(
    kb: PolicyStore, *, arch: str, attempts: list[Attempt]
) -> list[GroupEvaluation]:
    """PolicyEvaluation: predicted vs measured per (state, technique) for `arch`'s attempts."""
    groups: dict[tuple[str, str], list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.arch == arch:
            groups[(attempt.before_state, attempt.technique)].append(attempt)
    evaluations = []
    for (state, technique), members in groups.items():
        timed = [
            (a, measured)
            for a in members
            if a.outcome in VERIFIED_OUTCOMES
            and (measured := a.measured_speedup) is not None
            and measured > 0
            and a.predicted_speedup > 0
        ]
        pairs = [(measured, a.predicted_speedup) for a, measured in timed]  # (measured, predicted)
        gaps = [math.log(measured / predicted) for measured, predicted in pairs]
        by_finding: dict[str, list[float]] = defaultdict(list)
        for a, measured in timed:
            by_finding[target_of(a)].append(measured)
        entry = kb.entry(arch, state, technique)
        evaluations.append(
            GroupEvaluation(
                state=state,
                technique=technique,
                attempts=len(members),
                outcomes=dict(Counter(a.outcome for a in members)),
                predicted_speedup=_geomean([a.predicted_speedup for a in members]),
                measured_speedup=_geomean([m for m, _ in pairs]) if pairs else None,
                log_gap=sum(gaps) / len(gaps) if gaps else None,
                measured_by_finding={f: _geomean(v) for f, v in sorted(by_finding.items())},
                kb_predicted_speedup=entry.predicted_speedup if entry is not None else None,
                notes=list(entry.notes) if entry is not None else [],
                kernels=sorted({a.kernel for a in members}),
            )
        )
    return sorted(evaluations, key=_surprise, reverse=True)


def update_policy(
    client: LlmClient, kb: PolicyStore, *, arch: str, attempts: list[Attempt]
) -> PolicyUpdateResult:
    evaluation = evaluate_policy(kb, arch=arch, attempts=attempts)
    if not evaluation:
        return PolicyUpdateResult(evaluation=[])
    shown = evaluation[:MAX_GROUPS]
    table = "\n".join(_describe(group) for group in shown)

    gap = ask_json(
        client,
        render_messages("perf_gap", arch=arch, evaluation=table),
        _GapReply,
        purpose="perf_gap",
    )
    if gap.value is None:
        return PolicyUpdateResult(
            evaluation=evaluation, usage=gap.usage, error=f"gap analysis unusable: {gap.error}"
        )
    keys = {(g.state, g.technique) for g in shown}
    analyses = [
        GapAnalysis(state=a.state, technique=a.technique, explanation=a.explanation.strip()[:600])
        for a in gap.value.analyses
        if (a.state, a.technique) in keys
    ]
    analysis_text = "\n".join(f"- {a.state} / {a.technique}: {a.explanation}" for a in analyses)

    proposal = ask_json(
        client,
        render_messages(
            "parameter_update", arch=arch, evaluation=table, analysis=analysis_text or "(none)"
        ),
        _UpdateReply,
        purpose="parameter_update",
    )
    usage = gap.usage + proposal.usage
    if proposal.value is None:
        return PolicyUpdateResult(
            evaluation=evaluation, analyses=analyses, usage=usage,
            error=f"parameter update unusable: {proposal.error}",
        )  # fmt: skip
    applied, rejected = validate_items(
        proposal.value.updates,
        ParameterUpdate,
        lambda update, done: _problem(update, keys, {(u.state, u.technique) for u in done}),
        normalize=_stripped,
    )
    for update in applied:
        if update.note is not None:
            kb.add_note(arch, update.state, update.technique, update.note)
        if update.prior_speedup is not None:
            kb.set_prior(arch, update.state, update.technique, update.prior_speedup, update.reason)
    return PolicyUpdateResult(
        evaluation=evaluation, analyses=analyses, applied=applied, rejected=rejected, usage=usage
    )


def _stripped(update: ParameterUpdate) -> ParameterUpdate:
    return msgspec.structs.replace(
        update, note=(update.note or "").strip() or None, reason=update.reason.strip()
    )


def _problem(
    update: ParameterUpdate, keys: set[tuple[str, str]], done: set[tuple[str, str]]
) -> str | None:
    """Why a schema-valid update can't be applied, or None."""
    key = (update.state, update.technique)
    if key not in keys:
        return f"{update.state} / {update.technique} is not an entry of this batch"
    if update.note is None and update.prior_speedup is None:
        return "proposes neither a note nor a prior"
    if update.prior_speedup is not None and not update.reason:
        return "a prior change needs a reason"
    if key in done:
        return "a second update for the same entry"
    return text_problem(note=update.note or "", reason=update.reason)


def _geomean(values: list[float]) -> float:
    positive = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, positive)) / len(positive)) if positive else 0.0


def _surprise(group: GroupEvaluation) -> float:
    """How much a group says about the policy being wrong: gap size times evidence, plus
    failures (a predicted gain that never verified is a gap too)."""
    failures = sum(n for outcome, n in group.outcomes.items() if outcome not in VERIFIED_OUTCOMES)
    measured = group.attempts - failures
    return abs(group.log_gap or 0.0) * measured + 0.5 * failures


def _describe(group: GroupEvaluation) -> str:
    outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(group.outcomes.items()))
    parts = [
        f"- {group.state} / {group.technique}: {group.attempts} attempts ({outcomes}); "
        f"predicted {group.predicted_speedup:.2f}x"
    ]
    if group.measured_speedup is not None and group.log_gap is not None:
        parts.append(
            f", measured {group.measured_speedup:.2f}x (gap {math.exp(group.log_gap):.2f}x)"
        )
    else:
        parts.append(", nothing verified")
    if len(group.measured_by_finding) > 1:
        parts.append(
            "; by the finding it was aimed at: "
            + ", ".join(
                f"on {kernels_described(finding)} {measured:.2f}x"
                for finding, measured in group.measured_by_finding.items()
            )
        )
    if group.kb_predicted_speedup is not None:
        parts.append(f"; KB now predicts {group.kb_predicted_speedup:.2f}x")
    parts.append(f"; kernels: {', '.join(group.kernels[:5])}")
    if group.notes:
        parts.append("; notes: " + " | ".join(group.notes[-3:]))
    return "".join(parts)
