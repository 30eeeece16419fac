"""SQL on an open KB connection: reading and writing rows as records. Functions that write run
inside the caller's write transaction (KnowledgeBase.write_transaction), so the store and
kb.transfer compose them into one atomic change. The SQL is the dialect SQLite and PostgreSQL
share (`ON CONFLICT` upserts, `?` placeholders), so both back ends run exactly this code."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from kernelblaster.kb.catalog import is_bottleneck
from kernelblaster.kb.database import Connection
from kernelblaster.kb.records import (
    Attempt,
    Bottleneck,
    Change,
    Note,
    PriorOverride,
    Proposal,
    ProposalDecision,
    State,
    Technique,
    target_of,
)
from kernelblaster.kb.stats import EntryCounts, fold

MAX_NOTES = 8  # notes per entry that prompts see
MAX_NOTES_CHARS = 2000  # their total size

ATTEMPT_FIELDS = [f.name for f in msgspec.structs.fields(Attempt)]
ATTEMPT_COLUMNS = ", ".join(ATTEMPT_FIELDS)
_COUNT_FIELDS = [f.name for f in msgspec.structs.fields(EntryCounts)]
_ENTRY_KEY = ("arch", "state", "technique")
_FINDING_COUNTS_KEY = (*_ENTRY_KEY, "target_finding")
_TECHNIQUE_FIELDS = [f.name for f in msgspec.structs.fields(Technique)]
_TECHNIQUE_JSON = ("requires", "addresses_states", "addresses_findings")
_ENTRY_SELECT = (
    f"SELECT arch, state, technique, {', '.join(_COUNT_FIELDS)}, prior_speedup, prior_source, "
    "prior_time, updated FROM entries"
)


CountsByTarget = dict[tuple[str, str], EntryCounts]  # (technique, target finding) -> counts
# Counts of several finding_counts rows summed, as SQL over a GROUP BY: the log mean is the
# measurement-weighted mean and the sum of squared deviations the pooled one (each row's own,
# plus its mean's deviation from the pooled mean), so ranking's shrinkage sees their spread.
_POOLED_COUNTS = (
    "sum(attempts), sum(successes), sum(regressions), sum(failures), sum(n_measured), "
    "coalesce(sum(n_measured * mean_log_speedup) / nullif(sum(n_measured), 0), 0.0), "
    "coalesce(sum(m2_log_speedup + n_measured * mean_log_speedup * mean_log_speedup) - "
    "sum(n_measured * mean_log_speedup) * sum(n_measured * mean_log_speedup) / "
    "nullif(sum(n_measured), 0), 0.0)"
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


def put_technique(conn: Connection, technique: Technique, *, from_catalog: bool) -> None:
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


def techniques_revision(conn: Connection) -> int:
    """Changes whenever a technique is added or updated, so readers can cache the table."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'techniques_revision'").fetchone()
    return int(row[0]) if row else 0


def _bump_techniques_revision(conn: Connection) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('techniques_revision', '1') ON CONFLICT (key) "
        "DO UPDATE SET value = CAST(CAST(meta.value AS INTEGER) + 1 AS TEXT)"
    )


def load_techniques(conn: Connection) -> dict[str, Technique]:
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


def new_state(state: str, description: str = "") -> State:
    """A state first seen in an attempt or proposed by the state extractor: its bottleneck is
    its id's prefix when that names one."""
    prefix = state.split(".")[0]
    bottleneck: Bottleneck = prefix if is_bottleneck(prefix) else "unknown"
    return State(id=state, bottleneck=bottleneck, description=description)


def ensure_state(conn: Connection, state: str, description: str = "") -> bool:
    """Add `state` if unknown; True if it was added."""
    added = new_state(state, description)
    cursor = conn.execute(
        "INSERT INTO states (id, bottleneck, description) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        (added.id, added.bottleneck, added.description),
    )
    return cursor.rowcount > 0


def ensure_entry(conn: Connection, arch: str, state: str, technique: str) -> None:
    """Create the entry, its state and its technique if missing (nothing is silently dropped)."""
    ensure_state(conn, state)
    added = conn.execute(
        "INSERT INTO techniques (id, category, title, description, how_to_apply, "
        "prior_source) VALUES (?, 'learned', ?, 'A technique first seen in a recorded attempt.', "
        "'', 'no prior: first seen in a recorded attempt, assumed neutral (1.0x)') "
        "ON CONFLICT DO NOTHING",
        (technique, technique.replace("_", " ")),
    )
    if added.rowcount:
        _bump_techniques_revision(conn)
    conn.execute(
        "INSERT INTO entries (arch, state, technique, updated) VALUES (?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        (arch, state, technique, time.time()),
    )


# --- attempts and statistics -----------------------------------------------------------------


def attempt_from_row(row: Sequence[Any]) -> Attempt:
    return Attempt(**dict(zip(ATTEMPT_FIELDS, row, strict=True)))


def insert_attempt(conn: Connection, attempt: Attempt) -> bool:
    """Insert unless an attempt with this id exists; True if inserted."""
    cursor = conn.execute(
        f"INSERT INTO attempts ({ATTEMPT_COLUMNS}) "
        f"VALUES ({', '.join('?' * len(ATTEMPT_FIELDS))}) ON CONFLICT DO NOTHING",
        msgspec.structs.astuple(attempt),
    )
    return cursor.rowcount > 0


def record_in(conn: Connection, attempt: Attempt) -> bool:
    """Insert the attempt and fold it into its entry and into the entry's counts for its target
    finding; False if the id was already there."""
    if not insert_attempt(conn, attempt):
        return False
    if attempt.after_state:
        ensure_state(conn, attempt.after_state)
    key = (attempt.arch, attempt.before_state, attempt.technique)
    ensure_entry(conn, *key)
    counts = _stored_counts(conn, "entries", _ENTRY_KEY, key)
    fold(counts, attempt)
    _write_counts(conn, key, counts)
    target_key = (*key, target_of(attempt))
    by_target = _stored_counts(conn, "finding_counts", _FINDING_COUNTS_KEY, target_key)
    fold(by_target, attempt)
    _put_finding_counts(conn, target_key, by_target)
    return True


def refold_entry(conn: Connection, arch: str, state: str, technique: str) -> None:
    """Recompute an entry's statistics, in all and per target finding, from all its attempts
    (after a merge)."""
    key = (arch, state, technique)
    ensure_entry(conn, *key)
    counts = EntryCounts()
    by_target: dict[str, EntryCounts] = {}
    rows = conn.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE arch = ? AND before_state = ? AND "
        "technique = ? ORDER BY time, id",
        key,
    )
    for row in rows:
        attempt = attempt_from_row(row)
        fold(counts, attempt)
        fold(by_target.setdefault(target_of(attempt), EntryCounts()), attempt)
    _write_counts(conn, key, counts)
    conn.execute("DELETE FROM finding_counts WHERE arch = ? AND state = ? AND technique = ?", key)
    for target, target_counts in by_target.items():
        _put_finding_counts(conn, (*key, target), target_counts)


def _stored_counts(
    conn: Connection, table: str, key_columns: tuple[str, ...], key: tuple[str, ...]
) -> EntryCounts:
    """The counts of one row of `table` (entries or finding_counts); zeros when it has none."""
    row = conn.execute(
        f"SELECT {', '.join(_COUNT_FIELDS)} FROM {table} WHERE "
        + " AND ".join(f"{column} = ?" for column in key_columns),
        key,
    ).fetchone()
    return EntryCounts(*row) if row else EntryCounts()


def _write_counts(conn: Connection, key: tuple[str, str, str], c: EntryCounts) -> None:
    conn.execute(
        "UPDATE entries SET "
        + ", ".join(f"{n} = ?" for n in _COUNT_FIELDS)
        + ", updated = ? WHERE arch = ? AND state = ? AND technique = ?",
        (*msgspec.structs.astuple(c), time.time(), *key),
    )


def _put_finding_counts(conn: Connection, key: tuple[str, str, str, str], c: EntryCounts) -> None:
    names = [*_FINDING_COUNTS_KEY, *_COUNT_FIELDS, "updated"]
    conn.execute(
        f"INSERT INTO finding_counts ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
        f"ON CONFLICT ({', '.join(_FINDING_COUNTS_KEY)}) DO UPDATE SET "
        + ", ".join(f"{n} = excluded.{n}" for n in [*_COUNT_FIELDS, "updated"]),
        (*key, *msgspec.structs.astuple(c), time.time()),
    )


def entry_rows(conn: Connection, **filters: str | None) -> list[EntryRow]:
    clause, params = where(**filters)
    rows = conn.execute(_ENTRY_SELECT + clause + " ORDER BY arch, state, technique", params)
    return [_entry_row(row) for row in rows]


def _entry_row(row: Sequence[Any]) -> EntryRow:
    n = len(_COUNT_FIELDS)
    arch, state, technique = row[:3]
    prior_speedup, prior_source, prior_time, updated = row[3 + n :]
    counts = EntryCounts(*row[3 : 3 + n])
    return EntryRow(
        arch, state, technique, counts, prior_speedup, prior_source, prior_time, updated
    )


def kernel_counts(conn: Connection, state: str, arch: str, source_hash: str) -> CountsByTarget:
    """Per (technique, target finding): the attempts that started from this very kernel
    (`source_hash`), folded as the entries are."""
    counts: CountsByTarget = {}
    for row in conn.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE arch = ? AND before_state = ? "
        "AND source_hash = ?",
        (arch, state, source_hash),
    ):
        attempt = attempt_from_row(row)
        fold(counts.setdefault((attempt.technique, target_of(attempt)), EntryCounts()), attempt)
    return counts


def other_state_counts(conn: Connection, state: str, arch: str) -> CountsByTarget:
    """Per (technique, target finding): the counts on `arch` pooled over every state but
    `state` (`_POOLED_COUNTS`), for ranking's pooled tier."""
    rows = conn.execute(
        f"SELECT technique, target_finding, {_POOLED_COUNTS} FROM finding_counts "
        "WHERE arch = ? AND state != ? AND attempts > 0 GROUP BY technique, target_finding",
        (arch, state),
    )
    return _pooled(rows)


def finding_counts(
    conn: Connection, state: str, arch: str
) -> tuple[CountsByTarget, CountsByTarget]:
    """Per (technique, target finding) of `state`: the counts on `arch`, and those pooled over
    every other architecture (`_POOLED_COUNTS`). Each query reads rows in its index's order
    (rank() is hot: no sorting)."""
    here = conn.execute(
        f"SELECT technique, target_finding, {', '.join(_COUNT_FIELDS)} FROM finding_counts "
        "WHERE arch = ? AND state = ? AND attempts > 0",
        (arch, state),
    )
    elsewhere = conn.execute(
        f"SELECT technique, target_finding, {_POOLED_COUNTS} FROM finding_counts "
        "WHERE state = ? AND arch != ? AND attempts > 0 GROUP BY technique, target_finding",
        (state, arch),
    )
    here_counts = {(r[0], r[1]): EntryCounts(*r[2:]) for r in here}
    return here_counts, _pooled(elsewhere)


def _pooled(rows: Iterable[Sequence[Any]]) -> CountsByTarget:
    """(technique, target, *_POOLED_COUNTS) rows as counts; a pooled sum of squares that
    rounding left a hair below zero is zero."""
    pooled = {(r[0], r[1]): EntryCounts(*r[2:]) for r in rows}
    for counts in pooled.values():
        counts.m2_log_speedup = max(counts.m2_log_speedup, 0.0)
    return pooled


# --- notes -----------------------------------------------------------------------------------


def insert_note(conn: Connection, note: Note) -> bool:
    ensure_entry(conn, note.arch, note.state, note.technique)
    cursor = conn.execute(
        "INSERT INTO notes (id, arch, state, technique, time, text) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (note.id, note.arch, note.state, note.technique, note.time, note.text),
    )
    return cursor.rowcount > 0


def load_notes(conn: Connection, **filters: str | None) -> list[Note]:
    clause, params = where(**filters)
    rows = conn.execute(
        f"SELECT id, arch, state, technique, time, text FROM notes{clause} ORDER BY time, id",
        params,
    )
    return [
        Note(id=r[0], arch=r[1], state=r[2], technique=r[3], time=r[4], text=r[5]) for r in rows
    ]


def recent_notes(conn: Connection, arch: str, state: str) -> dict[str, list[str]]:
    """Per technique of (arch, state): the bounded recent notes prompts see."""
    rows = conn.execute(
        "SELECT technique, text FROM (SELECT technique, text, row_number() OVER "
        "(PARTITION BY technique ORDER BY time DESC, id DESC) AS recency FROM notes "
        "WHERE arch = ? AND state = ?) AS ranked WHERE recency <= ? ORDER BY technique, recency",
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


# --- priors and changes ----------------------------------------------------------------------


def put_prior(conn: Connection, prior: PriorOverride) -> bool:
    """Set an entry's prior unless it already has a newer one; True if it was set."""
    ensure_entry(conn, prior.arch, prior.state, prior.technique)
    cursor = conn.execute(
        "UPDATE entries SET prior_speedup = ?, prior_source = ?, prior_time = ?, updated = ? "
        "WHERE arch = ? AND state = ? AND technique = ? "
        "AND (prior_time IS NULL OR prior_time < ?)",
        (
            prior.prior_speedup,
            prior.prior_source,
            prior.time,
            prior.time,
            prior.arch,
            prior.state,
            prior.technique,
            prior.time,
        ),
    )
    return cursor.rowcount > 0


def apply_change(conn: Connection, change: Change) -> bool:
    """Apply one learned change; each is idempotent (an attempt or note by its id, a state by
    its id, a prior by its time, a proposal by its technique id and decision time), so applying
    it twice changes nothing the second time. True if it changed the KB."""
    if isinstance(change, Attempt):
        return record_in(conn, change)
    if isinstance(change, Note):
        return insert_note(conn, change)
    if isinstance(change, PriorOverride):
        return put_prior(conn, change)
    if isinstance(change, Proposal):
        return put_proposal(conn, change)
    return ensure_state(conn, change.id, change.description)


# --- proposals -------------------------------------------------------------------------------

_PROPOSAL_COLUMNS = (
    "technique, arch, state, kernel, model, time, decision, decision_time, decision_reason"
)
# The tables whose `technique` column names a technique (a rename updates them all).
_TECHNIQUE_COLUMNS = ("entries", "finding_counts", "attempts", "notes", "proposals")


def put_proposal(conn: Connection, proposal: Proposal) -> bool:
    """Add a proposal and its technique, unless that id is a catalog technique's (a proposal
    never replaces one); of a known proposal, take a newer decision. True if the KB changed."""
    technique = proposal.technique
    known = conn.execute(
        "SELECT decision_time FROM proposals WHERE technique = ?", (technique.id,)
    ).fetchone()
    if known is None:
        catalog = conn.execute(
            "SELECT from_catalog FROM techniques WHERE id = ?", (technique.id,)
        ).fetchone()
        if catalog is not None and catalog[0]:
            return False
        ensure_state(conn, proposal.state)
        put_technique(conn, technique, from_catalog=False)
        conn.execute(
            f"INSERT INTO proposals ({_PROPOSAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                technique.id,
                proposal.arch,
                proposal.state,
                proposal.kernel,
                proposal.model,
                proposal.time,
                proposal.decision,
                proposal.decision_time,
                proposal.decision_reason,
            ),
        )
        return True
    if proposal.decision_time is None or (
        known[0] is not None and known[0] >= proposal.decision_time
    ):
        return False
    conn.execute(
        "UPDATE proposals SET decision = ?, decision_time = ?, decision_reason = ? "
        "WHERE technique = ?",
        (proposal.decision, proposal.decision_time, proposal.decision_reason, technique.id),
    )
    _bump_techniques_revision(conn)  # rankings cache what the table holds: a status changed
    return True


def load_proposals(conn: Connection) -> list[Proposal]:
    """Every proposal with its technique, oldest first."""
    techniques = load_techniques(conn)
    found = conn.execute(f"SELECT {_PROPOSAL_COLUMNS} FROM proposals ORDER BY time, technique")
    return [
        Proposal(
            technique=techniques[r[0]],
            arch=r[1],
            state=r[2],
            kernel=r[3],
            model=r[4],
            time=r[5],
            decision=r[6],
            decision_time=r[7],
            decision_reason=r[8],
        )
        for r in found
    ]


def proposal_track(conn: Connection) -> dict[str, tuple[ProposalDecision | None, EntryCounts]]:
    """Per proposed technique: a user's decision, and its attempts' counts summed over every
    arch and state (the log mean is the measurement-weighted mean; the variance is left 0)."""
    found = conn.execute(
        "SELECT p.technique, p.decision, coalesce(sum(e.attempts), 0), "
        "coalesce(sum(e.successes), 0), coalesce(sum(e.regressions), 0), "
        "coalesce(sum(e.failures), 0), coalesce(sum(e.n_measured), 0), "
        "coalesce(sum(e.n_measured * e.mean_log_speedup) / nullif(sum(e.n_measured), 0), 0.0) "
        "FROM proposals p LEFT JOIN entries e ON e.technique = p.technique "
        "GROUP BY p.technique, p.decision"
    )
    return {r[0]: (r[1], EntryCounts(*r[2:])) for r in found}


def rename_technique(conn: Connection, old: str, new: str) -> None:
    """Give technique `old` the id `new` everywhere it is named (the caller checked both)."""
    conn.execute("UPDATE techniques SET id = ? WHERE id = ?", (new, old))
    for table in _TECHNIQUE_COLUMNS:
        conn.execute(f"UPDATE {table} SET technique = ? WHERE technique = ?", (new, old))
    _bump_techniques_revision(conn)
