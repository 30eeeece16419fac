"""Recording attempts, exact statistics, notes, priors, the catalog and the KB's location."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from kernelblaster.kb import rows
from kernelblaster.kb.catalog import CatalogError, load_catalog, parse_catalog
from kernelblaster.kb.records import MAX_NOTE_CHARS
from kernelblaster.kb.store import KnowledgeBase, default_path
from tests.kb.kb_helpers import make_attempt


def test_catalog_covers_every_category_with_sourced_priors(kb):
    techniques = kb.techniques()
    assert len(techniques) >= 25
    assert {t.category for t in techniques} == {
        "memory",
        "compute",
        "parallelism",
        "reduction",
        "structure",
        "launch",
    }
    addressed = {f for t in techniques for f in t.addresses_findings}
    assert addressed == {f.id for f in load_catalog().finding}  # every finding has a technique
    for technique in techniques:
        assert technique.prior_source and technique.prior_speedup >= 1.0
        assert technique.addresses_states or technique.addresses_findings
    assert kb.attempts() == []  # no invented track record
    assert all(e.attempts == 0 for e in kb.entries())


def test_catalog_rejects_unknown_finding():
    text = """
[[state]]
id = "memory.dram"
bottleneck = "memory"
[[technique]]
id = "x"
category = "memory"
title = "X"
description = "d"
how_to_apply = "h"
addresses_findings = ["made_up_finding"]
prior_speedup = 1.1
prior_source = "rule of thumb"
"""
    with pytest.raises(CatalogError, match="technique x addresses unknown findings"):
        parse_catalog(text)


def test_record_updates_statistics_exactly(kb):
    measured = [1.5, 0.8, 2.0, 1.1]
    for value in measured:
        kb.record(
            make_attempt(measured_speedup=value, outcome="success" if value > 1 else "regression")
        )
    for outcome in ("compile_error", "wrong_result", "crash"):
        kb.record(make_attempt(outcome=outcome))
    entry = kb.entry("sm_90", "memory.dram", "coalesce_global_access")
    logs = [math.log(v) for v in measured]
    assert (entry.attempts, entry.successes, entry.regressions, entry.failures) == (7, 3, 1, 3)
    assert entry.mean_log_speedup == pytest.approx(statistics.fmean(logs), abs=1e-12)
    assert entry.var_log_speedup == pytest.approx(statistics.variance(logs), abs=1e-12)


def test_record_is_idempotent_per_attempt_id(kb):
    attempt = make_attempt()
    assert kb.record(attempt) is True
    assert kb.record(attempt) is False
    assert kb.entry("sm_90", "memory.dram", "coalesce_global_access").attempts == 1
    assert len(kb.attempts()) == 1


def test_unknown_technique_and_state_create_the_entry(kb):
    kb.record(
        make_attempt(
            before_state="latency.warp_shuffle_bound",
            technique="swizzle_tma",
            after_state="compute.fma_heavy",
            measured_speedup=1.3,
        )
    )
    entry = kb.entry("sm_90", "latency.warp_shuffle_bound", "swizzle_tma")
    assert entry is not None and entry.successes == 1
    states = {s.id: s for s in kb.states()}
    assert states["latency.warp_shuffle_bound"].bottleneck == "latency"
    assert states["compute.fma_heavy"].bottleneck == "compute"
    learned = {t.id: t for t in kb.techniques()}["swizzle_tma"]
    assert learned.category == "learned" and learned.prior_speedup == 1.0
    ranked = kb.rank("sm_90", "latency.warp_shuffle_bound")
    assert "swizzle_tma" in [r.technique for r in ranked]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"measured_speedup": float("nan")}, "measured_speedup must be a positive number"),
        ({"measured_speedup": -1.0}, "measured_speedup must be a positive number"),
        ({"outcome": "wrong_result", "measured_speedup": 1.2}, "can't have a measured speedup"),
        ({"technique": " "}, "technique must not be empty"),
    ],
)
def test_record_rejects_bad_attempts_and_writes_nothing(kb, fields, message):
    with pytest.raises(ValueError, match=message):
        kb.record(make_attempt(**fields))
    assert kb.attempts() == []


def test_notes_are_bounded_and_history_is_kept(kb):
    key = ("sm_90", "memory.dram", "coalesce_global_access")
    for i in range(20):
        kb.add_note(*key, f"note {i}: " + "x" * 100)
    kb.add_note(*key, "y" * 5000)
    entry = kb.entry(*key)
    assert len(entry.notes) <= rows.MAX_NOTES
    assert sum(len(n) for n in entry.notes) <= rows.MAX_NOTES_CHARS
    assert entry.notes[-1].startswith("y") and entry.notes[-1].endswith("…")
    assert len(entry.notes[-1]) == MAX_NOTE_CHARS
    assert entry.notes[0].startswith("note 13")  # the most recent ones, oldest first
    history = kb.note_history(arch="sm_90")
    assert len(history) == 21 and history[0].text.startswith("note 0")
    ranked = {r.technique: r for r in kb.rank("sm_90", "memory.dram")}
    assert ranked["coalesce_global_access"].notes == entry.notes
    with pytest.raises(ValueError, match="must not be empty"):
        kb.add_note(*key, "   ")


def test_set_prior_overrides_catalog_prior_and_is_validated(kb):
    kb.set_prior("sm_90", "memory.dram", "kernel_fusion", 0.9, "fusion kept regressing on H200")
    ranked = {r.technique: r for r in kb.rank("sm_90", "memory.dram")}
    assert ranked["kernel_fusion"].gain_if_verified == pytest.approx(0.9)
    assert "policy update" in ranked["kernel_fusion"].explanation
    other_arch = {r.technique: r for r in kb.rank("sm_80", "memory.dram")}
    assert other_arch["kernel_fusion"].gain_if_verified == pytest.approx(1.4)
    with pytest.raises(ValueError, match="within"):
        kb.set_prior("sm_90", "memory.dram", "kernel_fusion", 50.0, "too good")
    with pytest.raises(ValueError, match="needs a reason"):
        kb.set_prior("sm_90", "memory.dram", "kernel_fusion", 1.2, "")


def test_attempts_filters_and_orders_newest_first(kb):
    first = make_attempt(arch="sm_80")
    second = make_attempt(arch="sm_90", technique="vectorized_loads")
    third = make_attempt(arch="sm_90")
    for attempt in (first, second, third):
        kb.record(attempt)
    assert [a.id for a in kb.attempts()] == [third.id, second.id, first.id]
    assert [a.id for a in kb.attempts(arch="sm_90", technique="coalesce_global_access")] == [
        third.id
    ]
    assert [a.id for a in kb.attempts(limit=1)] == [third.id]
    assert kb.attempts(state="compute.fp32") == []
    assert kb.attempts()[0] == third  # the record round-trips unchanged


def test_default_path_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("KERNELBLASTER_KB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "kernelblaster" / "kb.sqlite3"
    assert default_path("~/team.kb") == Path.home() / "team.kb"
    monkeypatch.setenv("KERNELBLASTER_KB", str(tmp_path / "env.kb"))
    assert default_path("~/team.kb") == tmp_path / "env.kb"


def test_catalog_sync_happens_once_and_reopen_keeps_data(kb_location):
    with KnowledgeBase.open(kb_location) as kb:
        kb.record(make_attempt())
    with KnowledgeBase.open(kb_location) as kb:
        assert len(kb.attempts()) == 1
        assert len(kb.techniques()) == len(load_catalog().technique)


def test_a_technique_learned_by_another_process_reaches_rank(kb, kb_location):
    assert "tma_multicast" not in {r.technique for r in kb.rank("sm_90", "memory.l2")}
    with KnowledgeBase.open(kb_location) as other:  # another editor window or CLI run
        other.record(make_attempt(before_state="memory.l2", technique="tma_multicast"))
    assert "tma_multicast" in {r.technique for r in kb.rank("sm_90", "memory.l2")}
    assert "tma_multicast" in {t.id for t in kb.techniques()}
