"""What a user does with the techniques agents proposed (`kernelblaster kb proposals`): list
them with where they came from and their track record, promote, retire or rename one.

A decision is a change like any other learned record (records.Proposal with a decision time),
so it travels to a team KB and through export and merge; of two decisions the newer wins.
"""

from __future__ import annotations

import math
import time

import msgspec

from kernelblaster.kb import rows
from kernelblaster.kb.proposal_status import status, technique_id_problem
from kernelblaster.kb.records import Proposal, ProposalDecision, ProposalStatus
from kernelblaster.kb.store import KnowledgeBase


class ProposalView(msgspec.Struct, kw_only=True):
    """A proposal as `kb proposals list --json` prints it and the KB view draws it: provenance,
    status and track record (over every arch and state it was tried in)."""

    technique: str
    title: str
    description: str
    how_to_apply: str
    addresses_findings: list[str]
    prior_speedup: float  # the proposer's claim (ranking caps it while on trial)
    prior_source: str
    arch: str  # where it was proposed
    state: str
    kernel: str
    model: str
    time: float
    status: ProposalStatus
    status_reason: str
    attempts: int
    successes: int
    regressions: int
    failures: int
    mean_speedup: float | None  # geometric mean over its verified, timed attempts


class ProposalNotFound(ValueError):
    pass


def proposal_views(kb: KnowledgeBase) -> list[ProposalView]:
    """Every proposal, oldest first."""

    track = kb.proposal_track()
    views = []
    for proposal in kb.proposals():
        if proposal.technique.id not in track:  # recorded between the two reads
            continue
        decision, counts = track[proposal.technique.id]
        current, reason = status(decision, counts)
        technique = proposal.technique
        views.append(
            ProposalView(
                technique=technique.id,
                title=technique.title,
                description=technique.description,
                how_to_apply=technique.how_to_apply,
                addresses_findings=technique.addresses_findings,
                prior_speedup=technique.prior_speedup,
                prior_source=technique.prior_source,
                arch=proposal.arch,
                state=proposal.state,
                kernel=proposal.kernel,
                model=proposal.model,
                time=proposal.time,
                status=current,
                status_reason=reason,
                attempts=counts.attempts,
                successes=counts.successes,
                regressions=counts.regressions,
                failures=counts.failures,
                mean_speedup=math.exp(counts.mean_log_speedup) if counts.n_measured else None,
            )
        )
    return views


def _find(kb: KnowledgeBase, technique: str) -> Proposal:
    found = next((p for p in kb.proposals() if p.technique.id == technique), None)
    if found is None:
        known = ", ".join(p.technique.id for p in kb.proposals()) or "none yet"
        raise ProposalNotFound(
            f"{technique!r} is not a proposed technique of {kb.path} (proposals: {known}); "
            "catalog techniques can't be promoted, retired or renamed"
        )
    return found


def decide(kb: KnowledgeBase, technique: str, decision: ProposalDecision, reason: str) -> None:
    """Promote or retire a proposal whatever its outcomes say (until a newer decision)."""
    proposal = _find(kb, technique)
    kb.propose(
        msgspec.structs.replace(
            proposal, decision=decision, decision_time=time.time(), decision_reason=reason.strip()
        )
    )


def rename(kb: KnowledgeBase, old: str, new: str, *, title: str | None = None) -> None:
    """Give a proposal a new id (and title) everywhere the KB names it, in one transaction.
    Exports taken before know it by its old id: merging one brings the old id back as a
    proposal of its own."""
    proposal = _find(kb, old)
    if problem := technique_id_problem(new):
        raise ValueError(problem)
    if kb.technique(new) is not None:
        raise ValueError(f"{new!r} is already a technique of {kb.path}: pick another id")
    with kb.write_transaction() as conn:
        rows.rename_technique(conn, old, new)
        renamed = msgspec.structs.replace(
            proposal.technique, id=new, title=title or proposal.technique.title
        )
        rows.put_technique(conn, renamed, from_catalog=False)
