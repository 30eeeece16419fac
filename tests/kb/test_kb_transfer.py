"""Export -> import round trip, merges that never double count, and no secrets in exports."""

from __future__ import annotations

import re
import typing

import msgspec
import pytest

from kernelblaster.kb.records import KBExport
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.transfer import (
    export_kb,
    import_kb,
    merge_kb,
    read_export,
    write_export,
)
from tests.kb.kb_helpers import make_attempt, refolded_counts, stored_counts


def _learn(kb: KnowledgeBase, arch: str, n: int) -> None:
    for i in range(n):
        outcome = ("success", "regression", "compile_error")[i % 3]
        kb.record(
            make_attempt(
                arch=arch,
                outcome=outcome,
                measured_speedup={"success": 1.3 + i / 100, "regression": 0.8}.get(outcome),
                prompt_tokens=1000 + i,
                completion_tokens=400,
            )
        )
    kb.record(make_attempt(arch=arch, technique="team_trick", before_state="memory.texture"))
    kb.add_note(arch, "memory.dram", "coalesce_global_access", f"{arch}: transposing helped")
    kb.set_prior(arch, "memory.dram", "kernel_fusion", 1.25, f"{arch}: fusion gains were small")


def _content(kb: KnowledgeBase):
    return (
        sorted(msgspec.to_builtins(kb.attempts()), key=lambda a: a["id"]),
        stored_counts(kb),
        [(n.id, n.text) for n in kb.note_history()],
        [(p.arch, p.technique, p.prior_speedup, p.prior_source) for p in kb.priors()],
        sorted(t.id for t in kb.techniques()),
    )


def test_export_import_round_trip(tmp_path, kb, new_location):
    _learn(kb, "sm_90", 30)
    path = tmp_path / "team.json"
    write_export(path, export_kb(kb))
    with KnowledgeBase.open(new_location("other")) as other:
        report = import_kb(other, read_export(path))
        assert report.attempts_added == 31 and report.notes_added == 1
        assert _content(other) == _content(kb)
        assert other.rank("sm_90", "memory.dram") == kb.rank("sm_90", "memory.dram")
    assert not list(tmp_path.glob(".team.json.*"))  # the atomic write left no temp file


def test_merge_adds_without_double_counting(kb, new_location):
    _learn(kb, "sm_90", 12)
    with KnowledgeBase.open(new_location("colleague")) as colleague:
        _learn(colleague, "sm_80", 9)
        shared = kb.attempts()[:5]
        for attempt in shared:  # attempts both already hold (e.g. from an earlier merge)
            colleague.record(attempt)
        theirs = export_kb(colleague)
    first = merge_kb(kb, theirs)
    assert first.attempts_added == 10 and first.attempts_already_present == 5
    assert first.notes_added == 1 and first.priors_updated == 1
    after_first = _content(kb)
    second = merge_kb(kb, theirs)  # merging the same file again changes nothing
    assert second.attempts_added == 0 and second.notes_added == 0
    assert second.priors_updated == 0 and second.entries_recomputed == 0
    assert _content(kb) == after_first
    assert len(kb.attempts()) == 13 + 10
    assert stored_counts(kb) == refolded_counts(kb)
    sm80 = kb.entry("sm_80", "memory.dram", "coalesce_global_access")
    assert (sm80.attempts, sm80.successes, sm80.regressions, sm80.failures) == (9, 3, 3, 3)
    assert {n.arch for n in kb.note_history()} == {"sm_80", "sm_90"}


def test_merge_keeps_the_newer_prior(kb, new_location):
    kb.set_prior("sm_90", "memory.dram", "kernel_fusion", 1.1, "older local view")
    with KnowledgeBase.open(new_location("b")) as other:
        other.set_prior("sm_90", "memory.dram", "kernel_fusion", 1.6, "newer team view")
        newer = export_kb(other)
    merge_kb(kb, newer)
    assert kb.entry("sm_90", "memory.dram", "kernel_fusion").prior_source == "newer team view"
    stale = msgspec.structs.replace(
        newer, priors=[msgspec.structs.replace(newer.priors[0], prior_speedup=0.5, time=1.0)]
    )
    assert merge_kb(kb, stale).priors_updated == 0
    assert kb.entry("sm_90", "memory.dram", "kernel_fusion").prior_speedup == 1.6


def test_import_refuses_to_overwrite_learned_data_unless_asked(kb, new_location):
    _learn(kb, "sm_90", 3)
    with KnowledgeBase.open(new_location("b")) as other:
        _learn(other, "sm_80", 6)
        theirs = export_kb(other)
    before = _content(kb)
    with pytest.raises(
        ValueError, match=r"already holds 4 attempts and 1 notes; use `kernelblaster kb merge"
    ):
        import_kb(kb, theirs)
    assert _content(kb) == before
    import_kb(kb, theirs, replace=True)
    assert {a.arch for a in kb.attempts()} == {"sm_80"}
    assert kb.entry("sm_90", "memory.dram", "coalesce_global_access") is None


def test_bad_export_files_are_reported_and_change_nothing(tmp_path, kb):
    _learn(kb, "sm_90", 3)
    before = _content(kb)
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "kernelblaster-kb", "exported": 1.0, "attempts": [{"id": 3}]}')
    with pytest.raises(ValueError, match="not a kernelblaster KB export"):
        read_export(broken)
    with pytest.raises(ValueError, match="can't read KB export"):
        read_export(tmp_path / "missing.json")
    poisoned = KBExport(
        exported=1.0,
        attempts=[
            make_attempt(arch="sm_80"),
            msgspec.structs.replace(make_attempt(), measured_speedup=float("inf")),
        ],
    )
    with pytest.raises(ValueError, match="measured_speedup must be a positive number"):
        merge_kb(kb, poisoned)
    assert _content(kb) == before


def _field_names(struct_type, seen=None) -> set[str]:
    seen = set() if seen is None else seen
    names = set()
    for field in msgspec.structs.fields(struct_type):
        names.add(field.name)
        for arg in typing.get_args(field.type) or (field.type,):
            inner = typing.get_args(arg) or (arg,)
            for candidate in inner:
                if (
                    isinstance(candidate, type)
                    and issubclass(candidate, msgspec.Struct)
                    and candidate not in seen
                ):
                    seen.add(candidate)
                    names |= _field_names(candidate, seen)
    return names


def test_exports_have_no_place_for_secrets():
    names = _field_names(KBExport)
    assert {"attempts", "prompt_tokens", "source_hash", "notes"} <= names  # it did recurse
    suspicious = [
        n for n in names if re.search(r"key|secret|password|auth|credential|url|endpoint", n)
    ]
    assert suspicious == []
