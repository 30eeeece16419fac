"""Corrupt, foreign and too-new files are refused and left untouched; v1 files migrate."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from kb_helpers import make_attempt

from kernelblaster.kb import schema
from kernelblaster.kb.schema import APPLICATION_ID, SCHEMA_VERSION, KBError
from kernelblaster.kb.store import KnowledgeBase, open_or_fallback


def _fingerprint(path: Path) -> tuple[str, list[str]]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(
        p.name for p in path.parent.iterdir()
    )


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path):
    path = tmp_path / "kb.sqlite3"
    path.write_bytes(b"\x00garbage that is not a database\n" * 100)
    before = _fingerprint(path)
    with pytest.raises(KBError, match=r"is not an SQLite database.*left untouched"):
        KnowledgeBase.open(path)
    assert _fingerprint(path) == before


def test_a_damaged_kb_is_refused_untouched(kb_path):
    with KnowledgeBase.open(kb_path) as kb:
        for _ in range(300):
            kb.record(make_attempt())
    data = bytearray(kb_path.read_bytes())
    data[4096 * 3 : 4096 * 6] = b"\x5a" * (4096 * 3)  # scribble over b-tree pages
    kb_path.write_bytes(bytes(data))
    before = _fingerprint(kb_path)
    with pytest.raises(KBError, match=r"is damaged.*left untouched"):
        KnowledgeBase.open(kb_path)
    assert _fingerprint(kb_path) == before


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE recipes (name TEXT)")
        conn.execute("INSERT INTO recipes VALUES ('bread')")
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(KBError, match=r"another application.*recipes"):
        KnowledgeBase.open(path)
    assert _fingerprint(path) == before


def test_a_kb_from_a_newer_version_is_refused(kb_path):
    KnowledgeBase.open(kb_path).close()
    with sqlite3.connect(kb_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(KBError, match=r"newer than this kernelblaster.*upgrade"):
        KnowledgeBase.open(kb_path)


def test_fallback_opens_a_fresh_kb_beside_a_corrupt_one(tmp_path):
    path = tmp_path / "kb.sqlite3"
    path.write_text("not a database")
    kb, message = open_or_fallback(path)
    with kb:
        assert kb.path == tmp_path / "kb.fresh.sqlite3"
        kb.record(make_attempt())
        assert len(kb.attempts()) == 1
    assert "not an SQLite database" in message and "kb.fresh.sqlite3" in message
    assert path.read_text() == "not a database"
    healthy, message = open_or_fallback(tmp_path / "kb.fresh.sqlite3")
    assert message is None and len(healthy.attempts()) == 1
    healthy.close()


def _schema_of(path: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    shape = {t: [r[1:] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
    shape["indexes"] = sorted(
        conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND "
            "name NOT LIKE 'sqlite_autoindex%'"
        ).fetchall()
    )
    conn.close()
    return shape


def test_v1_file_migrates_to_the_current_schema(tmp_path):
    v1 = tmp_path / "v1.sqlite3"
    conn = sqlite3.connect(v1)
    conn.executescript(schema.V1_DDL)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO entries (arch, state, technique, attempts, successes, n_measured, "
        "mean_log_speedup, notes, updated) VALUES ('sm_80', 'memory.dram', "
        "'coalesce_global_access', 1, 1, 1, 0.4054651081081644, 'transposing via smem worked', 5.0)"
    )
    conn.execute(
        "INSERT INTO attempts (id, time, arch, kernel, source_hash, candidate_hash, before_state, "
        "technique, predicted_speedup, measured_speedup, outcome) VALUES ('a1', 4.0, 'sm_80', "
        "'transpose', 'h0', 'h1', 'memory.dram', 'coalesce_global_access', 1.4, 1.5, 'success')"
    )
    conn.commit()
    conn.close()

    with KnowledgeBase.open(v1) as kb:
        (old,) = kb.attempts()
        assert old.id == "a1" and old.error_kind is None and old.measured_speedup == 1.5
        entry = kb.entry("sm_80", "memory.dram", "coalesce_global_access")
        assert entry.notes == ["transposing via smem worked"]
        assert (entry.attempts, entry.successes) == (1, 1)
        (note,) = kb.note_history()
        assert note.time == 5.0 and len(note.id) == 32
        kb.record(make_attempt(arch="sm_80", outcome="compile_error", error_kind="nvcc"))
        entry = kb.entry("sm_80", "memory.dram", "coalesce_global_access")
        assert (entry.attempts, entry.failures) == (2, 1)
        assert kb.attempts()[0].error_kind == "nvcc"
        assert len(kb.techniques()) >= 25  # the catalog was seeded into the migrated file

    fresh = tmp_path / "fresh.sqlite3"
    KnowledgeBase.open(fresh).close()
    assert _schema_of(v1) == _schema_of(fresh)
    check = sqlite3.connect(v1)
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
