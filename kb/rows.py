"""SQL on an open KB connection: reading and writing rows as records. Functions that write run
inside the caller's write transaction (KnowledgeBase.write_transaction), so the store and
kb.transfer compose them into one atomic change."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from kernelblaster.kb.catalog import BOTTLENECKS
from kernelblaster.kb.records import Attempt, Note, Technique
from kernelblaster.kb.stats import EntryCounts, fold

MAX_NOTES = 8  # notes per entry that prompts see
MAX_NOTES_CHARS = 2000  # their total size

ATTEMPT_FIELDS = [f.name for f in msgspec.structs.fields(Attempt)]
ATTEMPT_COLUMNS = ", ".join(ATTEMPT_FIELDS)
_COUNT_FIELDS = [f.name for f in msgspec.structs.fields(EntryCounts)]
_TECHNIQUE_FIELDS = [f.name for f in msgspec.structs.fields(Technique)]
_TECHNIQUE_JSON = ("requires", "addresses_states", "addresses_findings")
_ENTRY_SELECT = (
    f"SELECT arch, state, technique, {', '.join(_COUNT_FIELDS)}, prior_speedup, prior_source, "
    "prior_time, updated FROM entries"
)


class EntryRow(NamedTuple):
    arch: str
    state: str
    technique: str
    counts: EntryCounts
    prior_speedup: float | None
    prior_source: str | None
    prior_time: float | None
    updated: float


def where(**columns: str | None) -> tuple[str, list[str]]:
    """A WHERE clause matching every column whose value is not None."""
    used = {name: value for name, value in columns.items() if value is not None}
    if not used:
        return "", []
    return " WHERE " + " AND ".join(f"{name} = ?" for name in used), list(used.values())


# --- techniques and states -------------------------------------------------------------------


def put_technique(conn: sqlite3.Connection, technique: Technique, *, from_catalog: bool) -> None:
    values = msgspec.structs.asdict(technique)
    for name in _TECHNIQUE_JSON:
        values[name] = msgspec.json.encode(values[name]).decode()
    values["from_catalog"] = int(from_catalog)
    names = list(values)
    conn.execute(
        f"INSERT INTO techniques ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
        "ON CONFLICT (id) DO UPDATE SET "
        + ", ".join(f"{n} = excluded.{n}" for n in names if n != "id"),
        list(values.values()),
    )
    _bump_techniques_revision(conn)


def techniques_revision(conn: sqlite3.Connection) -> int:
    """Changes whenever a technique is added or updated, so readers can cache the table."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'techniques_revision'").fetchone()
    return int(row[0]) if row else 0


def _bump_techniques_revision(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('techniques_revision', '1') ON CONFLICT (key) "
        "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
    )


def load_techniques(conn: sqlite3.Connection) -> dict[str, Technique]:
    rows = conn.execute(
        f"SELECT {', '.join(_TECHNIQUE_FIELDS)} FROM techniques ORDER BY category, id"
    )
    techniques = {}
    for row in rows:
        values = dict(zip(_TECHNIQUE_FIELDS, row, strict=True))
        for name in _TECHNIQUE_JSON:
            values[name] = msgspec.json.decode(values[name], type=list[str])
        techniques[values["id"]] = Technique(**values)
    return techniques


def ensure_state(conn: sqlite3.Connection, state: str, description: str = "") -> bool:
    """Add `state` if unknown; True if it was added."""
    prefix = state.split(".")[0]
    cursor = conn.execute(
        "INSERT OR IGNORE INTO states (id, bottleneck, description) VALUES (?, ?, ?)",
        (state, prefix if prefix in BOTTLENECKS else "unknown", description),
    )
    return cursor.rowcount > 0


def ensure_entry(conn: sqlite3.Connection, arch: str, state: str, technique: str) -> None:
    """Create the entry, its state and its technique if missing (nothing is silently dropped)."""
    ensure_state(conn, state)
    added = conn.execute(
        "INSERT OR IGNORE INTO techniques (id, category, title, description, how_to_apply, "
        "prior_source) VALUES (?, 'learned', ?, 'A technique first seen in a recorded attempt.', "
        "'', 'no prior: first seen in a recorded attempt, assumed neutral (1.0x)')",
        (technique, technique.replace("_", " ")),
    )
    if added.rowcount:
        _bump_techniques_revision(conn)
    conn.execute(
        "INSERT OR IGNORE INTO entries (arch, state, technique, updated) VALUES (?, ?, ?, ?)",
        (arch, state, technique, time.time()),
    )


# --- attempts and statistics -----------------------------------------------------------------


def attempt_from_row(row: Sequence[object]) -> Attempt:
    return Attempt(**dict(zip(ATTEMPT_FIELDS, row, strict=True)))


def insert_attempt(conn: sqlite3.Connection, attempt: Attempt) -> bool:
    """Insert unless an attempt with this id exists; True if inserted."""
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO attempts ({ATTEMPT_COLUMNS}) "
        f"VALUES ({', '.join('?' * len(ATTEMPT_FIELDS))})",
        msgspec.structs.astuple(attempt),
    )
    return cursor.rowcount > 0


def record_in(conn: sqlite3.Connection, attempt: Attempt) -> bool:
    """Insert the attempt and fold it into its entry; False if the id was already there."""
    if not insert_attempt(conn, attempt):
        return False
    if attempt.after_state:
        ensure_state(conn, attempt.after_state)
    key = (attempt.arch, attempt.before_state, attempt.technique)
    ensure_entry(conn, *key)
    row = conn.execute(
        f"SELECT {', '.join(_COUNT_FIELDS)} FROM entries "
        "WHERE arch = ? AND state = ? AND technique = ?",
        key,
    ).fetchone()
    counts = EntryCounts(*row)
    fold(counts, attempt)
    _write_counts(conn, key, counts)
    return True


def refold_entry(conn: sqlite3.Connection, arch: str, state: str, technique: str) -> None:
    """Recompute an entry's statistics from all its attempts (after a merge)."""
    ensure_entry(conn, arch, state, technique)
    counts = EntryCounts()
    rows = conn.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE arch = ? AND before_state = ? AND "
        "technique = ? ORDER BY time, id",
        (arch, state, technique),
    )
    for row in rows:
        fold(counts, attempt_from_row(row))
    _write_counts(conn, (arch, state, technique), counts)


def _write_counts(conn: sqlite3.Connection, key: tuple[str, str, str], c: EntryCounts) -> None:
    conn.execute(
        "UPDATE entries SET "
        + ", ".join(f"{n} = ?" for n in _COUNT_FIELDS)
        + ", updated = ? WHERE arch = ? AND state = ? AND technique = ?",
        (*msgspec.structs.astuple(c), time.time(), *key),
    )


def entry_rows(conn: sqlite3.Connection, **filters: str | None) -> list[EntryRow]:
    clause, params = where(**filters)
    rows = conn.execute(_ENTRY_SELECT + clause + " ORDER BY arch, state, technique", params)
    return [_entry_row(row) for row in rows]


def _entry_row(row: Sequence) -> EntryRow:
    n = len(_COUNT_FIELDS)
    return EntryRow(*row[:3], EntryCounts(*row[3 : 3 + n]), *row[3 + n :])


def pooled_counts(conn: sqlite3.Connection, state: str, exclude_arch: str) -> dict:
    """Per technique, the counts of `state` summed over every other architecture (the log
    mean is the measurement-weighted mean; the pooled variance is not needed and left 0)."""
    rows = conn.execute(
        "SELECT technique, sum(attempts), sum(successes), sum(regressions), sum(failures), "
        "sum(n_measured), coalesce(sum(n_measured * mean_log_speedup) / "
        "nullif(sum(n_measured), 0), 0.0) FROM entries "
        "WHERE state = ? AND arch != ? AND attempts > 0 GROUP BY technique",
        (state, exclude_arch),
    )
    return {r[0]: EntryCounts(*r[1:]) for r in rows}


# --- notes -----------------------------------------------------------------------------------


def insert_note(conn: sqlite3.Connection, note: Note) -> bool:
    ensure_entry(conn, note.arch, note.state, note.technique)
    cursor = conn.execute(
        "INSERT OR IGNORE INTO notes (id, arch, state, technique, time, text) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (note.id, note.arch, note.state, note.technique, note.time, note.text),
    )
    return cursor.rowcount > 0


def load_notes(conn: sqlite3.Connection, **filters: str | None) -> list[Note]:
    clause, params = where(**filters)
    rows = conn.execute(
        f"SELECT id, arch, state, technique, time, text FROM notes{clause} ORDER BY time, id",
        params,
    )
    return [
        Note(id=r[0], arch=r[1], state=r[2], technique=r[3], time=r[4], text=r[5]) for r in rows
    ]


def recent_notes(conn: sqlite3.Connection, arch: str, state: str) -> dict[str, list[str]]:
    """Per technique of (arch, state): the bounded recent notes prompts see."""
    rows = conn.execute(
        "SELECT technique, text FROM (SELECT technique, text, row_number() OVER "
        "(PARTITION BY technique ORDER BY time DESC, id DESC) AS recency FROM notes "
        "WHERE arch = ? AND state = ?) WHERE recency <= ? ORDER BY technique, recency",
        (arch, state, MAX_NOTES),
    )
    newest_first: dict[str, list[str]] = {}
    for technique, text in rows:
        newest_first.setdefault(technique, []).append(text)
    return {technique: bounded(texts) for technique, texts in newest_first.items()}


def bounded(newest_first: list[str]) -> list[str]:
    """The most recent notes, at most MAX_NOTES and MAX_NOTES_CHARS in all, oldest first."""
    kept, total = [], 0
    for text in newest_first[:MAX_NOTES]:
        total += len(text)
        if total > MAX_NOTES_CHARS:
            break
        kept.append(text)
    return kept[::-1]
