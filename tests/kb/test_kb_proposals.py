"""Techniques agents proposed, in the KB: provenance, a conservative rank while on trial,
promotion and retirement by measured outcomes or a user's decision, rename, export and merge,
and the shipped catalog never written."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from kernelblaster.cli import main
from kernelblaster.kb.proposal_status import PROMOTE_AFTER, PROPOSAL_PRIOR_CAP, RETIRE_AFTER
from kernelblaster.kb.proposals import ProposalNotFound, decide, proposal_views, rename
from kernelblaster.kb.records import Proposal, Technique
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.transfer import export_kb, merge_kb
from kernelblaster.kb.view import kb_view
from tests.kb.kb_helpers import make_attempt

STATE = "memory.dram"
FINDING = "uncoalesced_global_access"
CATALOG = Path(__file__).resolve().parents[2] / "kb" / "catalog" / "catalog.toml"


class _Finding:
    def __init__(self, id: str, estimated_speedup: float | None):
        self.id, self.estimated_speedup = id, estimated_speedup


FINDINGS = [_Finding(FINDING, 60.0)]


def proposal(technique_id: str = "streaming_store_hints", prior: float = 3.0, **fields) -> Proposal:
    technique = Technique(
        id=technique_id,
        category="learned",
        title="Streaming cache hints for single-use data",
        description="Load and store data used once with evict-first cache hints so that it "
        "does not displace reused lines.",
        how_to_apply="Use the cache-streaming load and store intrinsics for the single-use "
        "input and output arrays.",
        addresses_states=[STATE],
        addresses_findings=[FINDING],
        prior_speedup=prior,
        prior_source="proposed by test-model: single-use data",
    )
    values = {
        "technique": technique,
        "arch": "sm_90",
        "state": STATE,
        "kernel": "relu_naive",
        "model": "test-model",
        "time": 1_700_000_000.0,
    }
    values.update(fields)
    return Proposal(**values)


def ranked(kb: KnowledgeBase) -> dict[str, int]:
    """Technique id -> position in the ranking for STATE with FINDINGS on sm_90."""
    return {r.technique: i for i, r in enumerate(kb.rank("sm_90", STATE, FINDINGS))}


def record(kb: KnowledgeBase, outcome: str, *, technique="streaming_store_hints", **fields):
    speedup = {"success": 1.4, "regression": 0.9}.get(outcome)
    kb.record(
        make_attempt(
            technique=technique,
            before_state=STATE,
            outcome=outcome,
            measured_speedup=speedup,
            target_finding=FINDING,
            **fields,
        )
    )


def test_a_proposal_enters_the_kb_with_provenance_and_a_conservative_rank(kb):
    assert kb.propose(proposal(prior=3.0))
    assert not kb.propose(proposal(prior=3.0))  # the same again changes nothing
    (view,) = proposal_views(kb)
    assert (view.technique, view.status, view.state, view.kernel, view.model, view.arch) == (
        "streaming_store_hints",
        "proposed",
        STATE,
        "relu_naive",
        "test-model",
        "sm_90",
    )
    ranking = kb.rank("sm_90", STATE, FINDINGS)
    mine = next(r for r in ranking if r.technique == "streaming_store_hints")
    assert mine.proposal == "proposed"
    # the model claimed 3x: untried, it is capped and ranks below every catalog technique
    assert mine.gain_if_verified <= PROPOSAL_PRIOR_CAP
    assert "proposed, on trial" in mine.explanation
    assert ranking[-1].technique == "streaming_store_hints"
    assert all(r.proposal is None for r in ranking[:-1])


def test_a_proposal_never_replaces_a_catalog_technique(kb):
    catalog = kb.technique("coalesce_global_access")
    assert not kb.propose(proposal("coalesce_global_access"))
    assert kb.technique("coalesce_global_access") == catalog
    assert proposal_views(kb) == []


def test_two_successes_promote_a_proposal_and_its_record_ranks_it(kb):
    kb.propose(proposal(prior=3.0))
    for _ in range(PROMOTE_AFTER - 1):
        record(kb, "success")
    assert proposal_views(kb)[0].status == "proposed"
    record(kb, "success")
    (view,) = proposal_views(kb)
    assert (view.status, view.successes, view.attempts) == ("promoted", PROMOTE_AFTER, 2)
    assert view.mean_speedup == pytest.approx(1.4)
    mine = next(r for r in kb.rank("sm_90", STATE, FINDINGS) if r.technique == view.technique)
    assert mine.proposal == "promoted"
    assert mine.gain_if_verified > PROPOSAL_PRIOR_CAP  # its own prior and record, uncapped


def test_a_failing_proposal_drops_below_the_catalog_and_is_retired(kb):
    kb.propose(proposal(prior=3.0))
    record(kb, "compile_error")
    # a catalog technique that failed as often still ranks above it
    record(kb, "compile_error", technique="read_only_cache")
    positions = ranked(kb)
    catalog = [tid for tid in positions if tid != "streaming_store_hints"]
    assert all(positions["streaming_store_hints"] > positions[tid] for tid in catalog)
    for _ in range(RETIRE_AFTER - 1):
        record(kb, "wrong_result")
    (view,) = proposal_views(kb)
    assert view.status == "retired" and view.failures == RETIRE_AFTER
    assert "streaming_store_hints" not in ranked(kb)


def test_a_proposal_on_trial_learns_from_the_evidence_tiers_under_its_capped_prior(kb):
    """Proposals are ranked like catalog techniques (kb.ranking.evidence_tiers): what they did
    aimed at the same finding on kernels of other states counts, pooled, and their attempts on
    the very kernel ranked count first; while on trial their prior stays capped."""

    def mine(**kwargs):
        ranking = kb.rank("sm_90", STATE, FINDINGS, **kwargs)
        return next(r for r in ranking if r.technique == "streaming_store_hints")

    kb.propose(proposal(prior=3.0))
    untried = mine()
    kb.record(
        make_attempt(
            technique="streaming_store_hints",
            before_state="memory.l2",
            measured_speedup=1.6,
            target_finding=FINDING,
        )
    )
    pooled = mine()
    assert pooled.proposal == "proposed"  # one success: still on trial
    assert pooled.basis == "other_states" and pooled.attempts == 1
    assert "proposed, on trial" in pooled.explanation and "capped at" in pooled.explanation
    assert pooled.gain_if_verified > untried.gain_if_verified
    for _ in range(2):
        record(kb, "compile_error", source_hash="k1")
    own = mine(source_hash="k1")
    assert own.proposal == "proposed" and "proposed, on trial" in own.explanation
    assert own.basis == "this_kernel" and (own.attempts, own.failures) == (2, 2)
    assert own.predicted_speedup < pooled.predicted_speedup
    assert mine(source_hash="another kernel").basis == "this_arch"


def test_a_users_decision_overrides_the_outcomes_and_the_newer_one_wins(kb):
    kb.propose(proposal())
    record(kb, "success")
    record(kb, "success")
    decide(kb, "streaming_store_hints", "retired", "breaks on unaligned inputs")
    (view,) = proposal_views(kb)
    assert view.status == "retired" and "by a user" in view.status_reason
    assert "streaming_store_hints" not in ranked(kb)
    decide(kb, "streaming_store_hints", "promoted", "")
    assert proposal_views(kb)[0].status == "promoted"
    assert ranked(kb)["streaming_store_hints"] >= 0
    with pytest.raises(ProposalNotFound, match="catalog techniques can't"):
        decide(kb, "coalesce_global_access", "retired", "")


def test_rename_moves_the_record_and_refuses_taken_or_bad_ids(kb):
    kb.propose(proposal())
    record(kb, "success")
    kb.add_note("sm_90", STATE, "streaming_store_hints", "pays on large arrays")
    rename(kb, "streaming_store_hints", "evict_first_hints", title="Evict-first hints")
    (view,) = proposal_views(kb)
    assert (view.technique, view.title, view.successes) == (
        "evict_first_hints",
        "Evict-first hints",
        1,
    )
    assert kb.technique("streaming_store_hints") is None
    assert {a.technique for a in kb.attempts()} == {"evict_first_hints"}
    assert kb.entry("sm_90", STATE, "evict_first_hints").notes == ["pays on large arrays"]
    with pytest.raises(ValueError, match="already a technique"):
        rename(kb, "evict_first_hints", "coalesce_global_access")
    with pytest.raises(ValueError, match="lower-case letters"):
        rename(kb, "evict_first_hints", "Evict First")
    with pytest.raises(ProposalNotFound):
        rename(kb, "coalesce_global_access", "coalesce_v2")


def test_proposals_travel_with_an_export_and_never_reach_the_catalog(kb, new_location):
    catalog_digest = hashlib.sha256(CATALOG.read_bytes()).hexdigest()
    kb.propose(proposal())
    record(kb, "success")
    data = export_kb(kb)
    assert [p.technique.id for p in data.proposals] == ["streaming_store_hints"]
    with KnowledgeBase.open(new_location("teammate")) as other:
        report = merge_kb(other, data)
        assert report.proposals_changed == 1
        (view,) = proposal_views(other)
        assert (view.kernel, view.model, view.successes) == ("relu_naive", "test-model", 1)
        # a decision taken later travels too; an older one does not undo it
        decide(kb, "streaming_store_hints", "retired", "too fragile")
        assert merge_kb(other, export_kb(kb)).proposals_changed == 1
        assert proposal_views(other)[0].status == "retired"
        assert merge_kb(other, data).proposals_changed == 0
        assert proposal_views(other)[0].status == "retired"
    assert hashlib.sha256(CATALOG.read_bytes()).hexdigest() == catalog_digest
    assert kb.technique("streaming_store_hints") is not None  # in the KB, not in the catalog


def test_the_kb_view_shows_provenance_status_and_record(kb):
    kb.propose(proposal(time=time.time()))
    record(kb, "regression")
    view = kb_view(kb)
    (shown,) = view.proposals
    assert (shown.state, shown.kernel, shown.regressions, shown.status) == (
        STATE,
        "relu_naive",
        1,
        "proposed",
    )
    entry = next(e for e in view.entries if e.technique == "streaming_store_hints")
    assert entry.proposal == "proposed"
    assert all(e.proposal is None for e in view.entries if e.technique != shown.technique)


def test_kb_proposals_cli_lists_promotes_retires_and_renames(capsys, tmp_path):
    path = tmp_path / "kb.sqlite3"
    with KnowledgeBase.open(path) as kb:
        kb.propose(proposal())
    assert main(["kb", "--kb", str(path), "proposals", "list", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["technique"], listed["status"]) == ("streaming_store_hints", "proposed")
    assert main(["kb", "--kb", str(path), "proposals", "retire", "streaming_store_hints"]) == 0
    assert (
        main(
            [
                "kb",
                "--kb",
                str(path),
                "proposals",
                "rename",
                "streaming_store_hints",
                "evict_first_hints",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["kb", "--kb", str(path), "proposals", "list"]) == 0
    out = capsys.readouterr().out
    assert "evict_first_hints" in out and "retired" in out and "relu_naive" in out
    assert main(["kb", "--kb", str(path), "proposals", "promote", "no_such_thing"]) == 1
    assert "not a proposed technique" in capsys.readouterr().err
