"""Corrupt, foreign and too-new KBs are refused and left untouched; v1 and v3 KBs migrate. The
damage tests are about SQLite files; foreign tables, newer versions and migration are tested on
both back ends."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from kernelblaster.harness.protocol.records import Finding
from kernelblaster.kb import schema
from kernelblaster.kb.connect import open_database
from kernelblaster.kb.fallback import open_or_fallback
from kernelblaster.kb.schema import SCHEMA_VERSION, KBError
from kernelblaster.kb.store import KnowledgeBase
from tests.kb.kb_helpers import integrity, make_attempt, refolded_counts, stored_counts


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


def test_a_damaged_kb_is_refused_untouched(tmp_path):
    kb_path = tmp_path / "kb.sqlite3"
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


def test_a_kb_from_a_newer_version_is_refused(kb_location):
    KnowledgeBase.open(kb_location).close()
    db = open_database(kb_location)
    db.begin(write=True)
    db.set_schema_version(SCHEMA_VERSION + 1)
    db.commit()
    db.close()
    with pytest.raises(KBError, match=r"newer than this kernelblaster.*upgrade"):
        KnowledgeBase.open(kb_location)


def test_foreign_tables_in_a_team_database_are_refused_untouched(postgres_server):
    database = postgres_server.create_database("foreign")
    postgres_server.admin("CREATE TABLE attempts (who TEXT, score INTEGER)", database)
    postgres_server.admin("INSERT INTO attempts VALUES ('ann', 3)", database)
    with pytest.raises(KBError, match=r"tables of another application \(attempts\).*untouched"):
        KnowledgeBase.open(postgres_server.url(database))
    tables = postgres_server.admin(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'", database
    )
    assert tables == [("attempts",)]
    assert postgres_server.admin("SELECT * FROM attempts", database) == [("ann", 3)]


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


def _schema_of(location) -> dict:
    """Tables with their columns (name, type, not null, default, primary key) and indexes."""
    db = open_database(location)
    if isinstance(location, str):
        columns = db.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default, "
            "ordinal_position FROM information_schema.columns WHERE table_schema = 'public' "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
        indexes = db.execute(
            "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE schemaname = 'public' "
            "ORDER BY indexname"
        ).fetchall()
        shape = {"columns": columns, "indexes": indexes}
    else:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        shape = {t: [r[1:] for r in db.execute(f"PRAGMA table_info({t})")] for t in tables}
        shape["indexes"] = sorted(
            db.execute(
                "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND "
                "name NOT LIKE 'sqlite_autoindex%'"
            ).fetchall()
        )
    db.close()
    return shape


def test_v1_kb_migrates_to_the_current_schema(new_location):
    v1 = new_location("v1")
    db = open_database(v1)  # made by hand, as kernelblaster 0.1 left it
    db.begin(write=True)
    for statement in schema._statements(db.ddl(schema.V1_DDL)):
        db.execute(statement)
    db.set_schema_version(1)
    db.execute(
        "INSERT INTO entries (arch, state, technique, attempts, successes, n_measured, "
        "mean_log_speedup, notes, updated) VALUES ('sm_80', 'memory.dram', "
        "'coalesce_global_access', 1, 1, 1, 0.4054651081081644, 'transposing via smem worked', 5.0)"
    )
    db.execute(
        "INSERT INTO attempts (id, time, arch, kernel, source_hash, candidate_hash, before_state, "
        "technique, predicted_speedup, measured_speedup, outcome) VALUES ('a1', 4.0, 'sm_80', "
        "'transpose', 'h0', 'h1', 'memory.dram', 'coalesce_global_access', 1.4, 1.5, 'success')"
    )
    db.commit()
    db.close()

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
        assert len(kb.techniques()) >= 25  # the catalog was seeded into the migrated KB
        assert kb.summary().schema_version == SCHEMA_VERSION

    fresh = new_location("fresh")
    KnowledgeBase.open(fresh).close()
    assert _schema_of(v1) == _schema_of(fresh)
    assert integrity(v1) == "ok"


# A KB written by kernelblaster at schema 3 (commit f43ddd5, before kernel-aware learning):
# 9 attempts (one an infrastructure failure) over 5 entries and 2 architectures, a note and a
# prior set by the policy update.
V3_KB = Path(__file__).resolve().parents[1] / "fixtures" / "kb" / "v3-kb.sqlite3"


def _v3_copy(new_location) -> Path | str:
    """The v3 KB: a copy of the file, or on PostgreSQL a database brought to schema 3 by that
    version's migrations and holding the file's rows."""
    location = new_location("v3")
    if not isinstance(location, str):
        shutil.copyfile(V3_KB, location)
        return location
    source = sqlite3.connect(V3_KB)
    db = open_database(location)
    db.begin(write=True)
    for step in schema.MIGRATIONS[:3]:
        for statement in schema._statements(db.ddl(step)):
            db.execute(statement)
    for table in ("meta", "states", "techniques", "entries", "attempts", "notes"):
        cursor = source.execute(f"SELECT * FROM {table}")
        columns = [column[0] for column in cursor.description]
        for row in cursor:
            db.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' * len(columns))})",
                row,
            )
    db.set_schema_version(3)
    db.commit()
    db.close()
    source.close()
    return location


def test_a_v3_kb_migrates_keeping_every_attempt_and_what_it_learned(new_location):
    with closing(sqlite3.connect(V3_KB)) as source:
        written = source.execute(
            "SELECT id, technique, outcome, measured_speedup FROM attempts ORDER BY id"
        ).fetchall()
        learned = {
            tuple(row[:3]): (*row[3:7], None if not row[7] else round(row[8], 9))
            for row in source.execute(
                "SELECT arch, state, technique, attempts, successes, regressions, failures, "
                "n_measured, mean_log_speedup FROM entries WHERE attempts > 0"
            )
        }
    v3 = _v3_copy(new_location)

    with KnowledgeBase.open(v3) as kb:
        assert kb.summary().schema_version == SCHEMA_VERSION
        attempts = kb.attempts()
        assert sorted((a.id, a.technique, a.outcome, a.measured_speedup) for a in attempts) == (
            written
        )
        assert len(written) == 9 and all(a.target_finding is None for a in attempts)
        assert stored_counts(kb) == learned == refolded_counts(kb)
        assert kb.entry("sm_90", "memory.dram", "vectorized_loads").prior_speedup == 1.3
        assert [n.text for n in kb.note_history()] == ["one block per row: coalesced row reads"]
        # what it learned still ranks: on attempts whose kernels' findings were not recorded
        uncoalesced = [Finding(id="uncoalesced_global_access", estimated_speedup=87.0)]
        coalescing = kb.rank("sm_90", "launch.small_grid", uncoalesced)[0]
        assert coalescing.technique == "coalesce_global_access"
        assert (coalescing.attempts, coalescing.successes, coalescing.failures) == (4, 3, 1)
        assert coalescing.evidence == (
            "4 attempts on sm_90 on kernels whose findings were not recorded"
        )
        # a new attempt records its target, and takes over for kernels with that finding
        kb.record(
            make_attempt(
                before_state="launch.small_grid",
                target_finding="uncoalesced_global_access",
                measured_speedup=20.0,
            )
        )
        assert kb.attempts()[0].target_finding == "uncoalesced_global_access"
        coalescing = kb.rank("sm_90", "launch.small_grid", uncoalesced)[0]
        assert coalescing.attempts == 1 and coalescing.mean_speedup == pytest.approx(20.0)
        assert coalescing.evidence == (
            "1 attempt on sm_90 on kernels with uncoalesced_global_access"
        )
        entry = kb.entry("sm_90", "launch.small_grid", "coalesce_global_access")
        assert entry.attempts == 5  # the entry's own record: every attempt, whatever its target

    fresh = new_location("fresh")
    KnowledgeBase.open(fresh).close()
    assert _schema_of(v3) == _schema_of(fresh)
    assert integrity(v3) == "ok"
