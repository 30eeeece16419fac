"""What `kernelblaster kb show --json` prints and the editors' KB views draw: each (arch, state,
technique) entry with a record, note or prior, its technique's title and every measured speedup
beside its prediction; the latest attempts; and the proposed techniques with their provenance and
record."""

from __future__ import annotations

import msgspec

from kernelblaster.kb.proposals import ProposalView, proposal_views
from kernelblaster.kb.records import Attempt, EntryStats, KBSummary, ProposalStatus
from kernelblaster.kb.store import KnowledgeBase

RECENT_ATTEMPTS = 50
# Measurements kept per entry: enough for a distribution plot, bounded for a big KB.
MEASUREMENTS_PER_ENTRY = 200


class Measurement(msgspec.Struct, kw_only=True):
    """One verified, timed attempt: what the ranking predicted and what was measured."""

    time: float
    kernel: str
    predicted_speedup: float
    measured_speedup: float
    outcome: str


class TrackRecord(EntryStats, kw_only=True):
    """An entry's statistics (every `EntryStats` field) with what a reader needs beside them."""

    title: str  # the technique's title; its id for a technique the catalog doesn't know
    category: str
    measurements: list[Measurement]  # oldest first, the most recent MEASUREMENTS_PER_ENTRY
    proposal: ProposalStatus | None = None  # for a technique an agent proposed


class KBView(msgspec.Struct, kw_only=True):
    summary: KBSummary
    entries: list[TrackRecord]
    recent_attempts: list[Attempt]  # most recent first
    proposals: list[ProposalView] = []  # oldest first


def kb_view(
    kb: KnowledgeBase,
    *,
    arch: str | None = None,
    state: str | None = None,
    recent: int = RECENT_ATTEMPTS,
) -> KBView:
    techniques = {t.id: t for t in kb.techniques()}
    proposals = proposal_views(kb)
    status = {p.technique: p.status for p in proposals}
    attempts = kb.attempts(arch=arch, state=state)
    measured: dict[tuple[str, str, str], list[Measurement]] = {}
    for attempt in reversed(attempts):  # oldest first
        if attempt.measured_speedup is None:
            continue
        measured.setdefault((attempt.arch, attempt.before_state, attempt.technique), []).append(
            Measurement(
                time=attempt.time,
                kernel=attempt.kernel,
                predicted_speedup=attempt.predicted_speedup,
                measured_speedup=attempt.measured_speedup,
                outcome=attempt.outcome,
            )
        )
    entries = []
    for entry in kb.entries(arch=arch, state=state):
        if not (entry.attempts or entry.notes or entry.prior_speedup is not None):
            continue
        technique = techniques.get(entry.technique)
        key = (entry.arch, entry.state, entry.technique)
        entries.append(
            TrackRecord(
                **msgspec.structs.asdict(entry),
                title=technique.title if technique else entry.technique,
                category=technique.category if technique else "learned",
                measurements=measured.get(key, [])[-MEASUREMENTS_PER_ENTRY:],
                proposal=status.get(entry.technique),
            )
        )
    return KBView(
        summary=kb.summary(),
        entries=entries,
        recent_attempts=attempts[:recent],
        proposals=proposals,
    )
