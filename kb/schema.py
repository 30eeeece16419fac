"""The KB's schema as forward migrations, and the checks run when an SQLite file opens. A fresh
database runs every step from version 0, so the migration path is exercised on every new KB, on
both back ends (`Database.ddl` renders the SQLite types). `PRAGMA application_id` marks an SQLite
file as ours, so a foreign one is left alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelblaster.kb.database import Database

APPLICATION_ID = 0x4B424B42  # "KBKB"
SQLITE_HEADER = b"SQLite format 3\x00"


class KBError(Exception):
    """A KB file that can't be used (corrupt, foreign, too new); the message says which file,
    what is wrong and how to fix it."""


# The statistics columns of an (arch, state, technique) entry, in every version that has them
# (kb.stats.EntryCounts).
COUNT_COLUMNS = """\
    attempts INTEGER NOT NULL DEFAULT 0,
    successes INTEGER NOT NULL DEFAULT 0,
    regressions INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    n_measured INTEGER NOT NULL DEFAULT 0,
    mean_log_speedup REAL NOT NULL DEFAULT 0.0,
    m2_log_speedup REAL NOT NULL DEFAULT 0.0,
"""

# Version 1, as released: one free-text note per entry, no error kind on attempts.
V1_DDL = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE states (
    id TEXT PRIMARY KEY,
    bottleneck TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    arch TEXT
);
CREATE TABLE techniques (
    id TEXT PRIMARY KEY,
    category TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    how_to_apply TEXT NOT NULL,
    requires TEXT NOT NULL DEFAULT '[]',
    addresses_states TEXT NOT NULL DEFAULT '[]',
    addresses_findings TEXT NOT NULL DEFAULT '[]',
    prior_speedup REAL NOT NULL DEFAULT 1.0,
    prior_source TEXT NOT NULL DEFAULT '',
    from_catalog INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE entries (
    arch TEXT NOT NULL,
    state TEXT NOT NULL,
    technique TEXT NOT NULL,
{COUNT_COLUMNS}    prior_speedup REAL,
    prior_source TEXT,
    prior_time REAL,
    notes TEXT NOT NULL DEFAULT '',
    updated REAL NOT NULL,
    PRIMARY KEY (arch, state, technique)
);
CREATE INDEX entries_by_state ON entries (state, technique);
CREATE TABLE attempts (
    id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    arch TEXT NOT NULL,
    kernel TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    candidate_hash TEXT NOT NULL,
    before_state TEXT NOT NULL,
    after_state TEXT,
    technique TEXT NOT NULL,
    predicted_speedup REAL NOT NULL,
    measured_speedup REAL,
    outcome TEXT NOT NULL,
    correctness_detail TEXT NOT NULL DEFAULT '',
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX attempts_by_entry ON attempts (arch, before_state, technique, time);
CREATE INDEX attempts_by_time ON attempts (time);
"""

# Version 2: notes get a history table (every note kept, prompts see a bounded recent window)
# and attempts record what kind of error stopped them.
V2_DDL = f"""
CREATE TABLE notes (
    id TEXT PRIMARY KEY,
    arch TEXT NOT NULL,
    state TEXT NOT NULL,
    technique TEXT NOT NULL,
    time REAL NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX notes_by_entry ON notes (arch, state, technique, time);
INSERT INTO notes (id, arch, state, technique, time, text)
    SELECT lower(hex(randomblob(16))), arch, state, technique, updated, notes
    FROM entries WHERE notes != '';
CREATE TABLE entries_v2 (
    arch TEXT NOT NULL,
    state TEXT NOT NULL,
    technique TEXT NOT NULL,
{COUNT_COLUMNS}    prior_speedup REAL,
    prior_source TEXT,
    prior_time REAL,
    updated REAL NOT NULL,
    PRIMARY KEY (arch, state, technique)
);
INSERT INTO entries_v2
    SELECT arch, state, technique, attempts, successes, regressions, failures, n_measured,
           mean_log_speedup, m2_log_speedup, prior_speedup, prior_source, prior_time, updated
    FROM entries;
DROP TABLE entries;
ALTER TABLE entries_v2 RENAME TO entries;
CREATE INDEX entries_by_state ON entries (state, technique);
ALTER TABLE attempts ADD COLUMN error_kind TEXT;
"""

# Version 3: the outbox of a team KB (PostgreSQL): what was recorded while its server could not be
# reached waits here, in the local SQLite KB, until it is sent (kb.team). `target` is the team
# KB's URL, `id` the record's key (an attempt's or a note's id, a state id, an entry for a prior).
V3_DDL = """
CREATE TABLE outbox (
    target TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    queued REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (target, kind, id)
);
"""

# Version 4: attempts record the finding their technique aimed at (`target_finding`), and entries'
# statistics are also split by it (`finding_counts`), which ranking learns from. Earlier attempts
# keep theirs under '(not recorded)'.
V4_DDL = f"""
ALTER TABLE attempts ADD COLUMN target_finding TEXT;
CREATE TABLE finding_counts (
    arch TEXT NOT NULL,
    state TEXT NOT NULL,
    technique TEXT NOT NULL,
    target_finding TEXT NOT NULL,
{COUNT_COLUMNS}    updated REAL NOT NULL,
    PRIMARY KEY (arch, state, technique, target_finding)
);
CREATE INDEX finding_counts_by_state ON finding_counts (state, technique, target_finding);
INSERT INTO finding_counts
    SELECT arch, state, technique, '(not recorded)', attempts, successes, regressions, failures,
           n_measured, mean_log_speedup, m2_log_speedup, updated
    FROM entries WHERE attempts > 0;
"""

# Version 5: techniques an agent proposed (records.Proposal), with where they came from and a
# user's decision; the technique itself is a row of `techniques` (from_catalog 0) like any other.
V5_DDL = """
CREATE TABLE proposals (
    technique TEXT PRIMARY KEY,
    arch TEXT NOT NULL,
    state TEXT NOT NULL,
    kernel TEXT NOT NULL,
    model TEXT NOT NULL,
    time REAL NOT NULL,
    decision TEXT,
    decision_time REAL,
    decision_reason TEXT NOT NULL DEFAULT ''
);
"""

# MIGRATIONS[i] takes a database from version i to version i + 1.
MIGRATIONS: list[str] = [V1_DDL, V2_DDL, V3_DDL, V4_DDL, V5_DDL]
SCHEMA_VERSION = len(MIGRATIONS)
OUR_TABLES = frozenset({"meta", "states", "techniques", "entries", "attempts"})


def check_file(path: Path) -> None:
    """Raise KBError if `path` exists but is not a KB this version can open. Never writes."""
    if not path.exists():
        return
    if not path.is_file():
        raise KBError(f"knowledge base path {path} is not a file; set kb_path to a file path")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise KBError(
            f"knowledge base {path} can't be read ({exc.strerror or exc}): make it readable "
            "(and writable) for you, or set kb_path / KERNELBLASTER_KB to another file"
        ) from exc
    if header and header != SQLITE_HEADER:
        raise KBError(
            f"knowledge base {path} is not an SQLite database (corrupt or another kind of file); "
            "it was left untouched: move it away or set kb_path / KERNELBLASTER_KB to another file"
        )
    if not header:
        return  # an empty file becomes a fresh KB
    # Without a -wal file the main file is the whole database: open it immutable, so probing
    # creates no -wal/-shm beside a file that may not be ours.
    has_wal = path.with_name(path.name + "-wal").exists()
    mode = "mode=ro" if has_wal else "mode=ro&immutable=1"
    try:
        probe = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True)
    except sqlite3.Error as exc:
        raise KBError(f"knowledge base {path} can't be opened: {exc}") from exc
    try:
        app_id = probe.execute("PRAGMA application_id").fetchone()[0]
        version = probe.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in probe.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        # Catch damage before a read-write connection touches the file (quick_check reads every
        # page once: a few ms for a typical KB, ~0.1 s at 100k attempts).
        problem = probe.execute("PRAGMA quick_check(1)").fetchone()[0]
        if problem != "ok":
            raise sqlite3.DatabaseError(
                " ".join(problem.replace("*** in database main ***", "").split())
            )
    except sqlite3.DatabaseError as exc:
        raise KBError(
            f"knowledge base {path} is damaged ({exc}); it was left untouched: restore it from an "
            "export or backup, or set kb_path / KERNELBLASTER_KB to another file"
        ) from exc
    finally:
        probe.close()
    if app_id != APPLICATION_ID and tables:
        raise KBError(
            f"{path} is an SQLite database of another application (tables: "
            f"{', '.join(sorted(tables)[:6])}); it was left untouched: point kb_path / "
            "KERNELBLASTER_KB at a kernelblaster KB file or a path that does not exist yet"
        )
    if app_id == APPLICATION_ID and version > SCHEMA_VERSION:
        raise too_new(path, version)
    if app_id == APPLICATION_ID and version and not tables >= OUR_TABLES:
        raise KBError(
            f"knowledge base {path} is missing tables {sorted(OUR_TABLES - tables)}; it was left "
            "untouched: restore it from an export or set kb_path to another file"
        )


def migrate(db: Database) -> int:
    """Bring the schema up to SCHEMA_VERSION in one write transaction (another process may have
    migrated already; the version is re-read once the write lock is held). Returns the version
    the database had."""
    if db.schema_version() == SCHEMA_VERSION:
        return SCHEMA_VERSION
    db.begin(write=True)
    try:
        found = db.schema_version()
        if found > SCHEMA_VERSION:
            raise too_new(db.location, found)
        for step in MIGRATIONS[found:]:
            for statement in _statements(db.ddl(step)):
                db.execute(statement)
        db.set_schema_version(SCHEMA_VERSION)
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return found


def too_new(location: Path | str, version: int) -> KBError:
    return KBError(
        f"knowledge base {location} has schema version {version}, newer than this kernelblaster "
        f"understands ({SCHEMA_VERSION}); upgrade kernelblaster to use it"
    )


def _statements(script: str) -> list[str]:
    """Split a DDL script into statements (SQLite's executescript would commit our transaction;
    PostgreSQL takes one statement per call with parameters)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    return statements
