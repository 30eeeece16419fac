"""The knowledge base: the store every part of kernelblaster reads and writes, on SQLite (per user)
or a team's PostgreSQL server. Every write is one transaction that excludes other writers, so an
attempt and the statistics it changes land together, writers queue, and a killed process leaves
only what was committed. Every public method goes through `_read` or `_apply`, where kb.team
steps in while its server is unreachable."""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import platformdirs

from kernelblaster.kb import outbox, proposal_status, ranking, rows
from kernelblaster.kb.catalog import load_catalog
from kernelblaster.kb.connect import open_database
from kernelblaster.kb.database import (
    Connection,
    Database,
    KBReadOnly,
)
from kernelblaster.kb.records import (
    Attempt,
    Change,
    EntryStats,
    FindingLike,
    KBSummary,
    Note,
    PriorOverride,
    Proposal,
    ProposalDecision,
    ProposalStatus,
    RankedTechnique,
    State,
    Technique,
    clip_note,
)
from kernelblaster.kb.schema import SCHEMA_VERSION, KBError, migrate
from kernelblaster.kb.stats import EntryCounts, validate_attempt
from kernelblaster.kb_location import is_postgres_url

PRIOR_RANGE = (0.1, 10.0)

T = TypeVar("T")


def personal_path() -> Path:
    """The per-user SQLite KB in the platform's data directory."""
    return Path(platformdirs.user_data_dir("kernelblaster", appauthor=False)) / "kb.sqlite3"


def default_path(settings_kb_path: str | None = None) -> Path | str:
    """KERNELBLASTER_KB, else the `kb_path` setting, else the personal KB: a file path, or a
    PostgreSQL URL (kept a string: a Path would fold its `//`)."""
    chosen = os.environ.get("KERNELBLASTER_KB") or settings_kb_path
    if chosen:
        return chosen if is_postgres_url(chosen) else Path(chosen).expanduser()
    return personal_path()


class KnowledgeBase:
    def __init__(self, db: Database):
        self._db = db
        self._lock = threading.RLock()  # one connection, shared by the server's threads
        # (connection, revision, techniques): rank() is hot, the table rarely changes
        self._technique_cache: tuple[object, int, dict[str, Technique]] = (None, -1, {})

    @property
    def path(self) -> Path | str:
        """The file, or the team KB's URL (never with a password)."""
        return self._db.location

    @classmethod
    def open(cls, location: Path | str | None = None) -> KnowledgeBase:
        kb = cls(open_database(location if location is not None else default_path()))
        try:
            kb._prepare()
        except BaseException:
            kb.close()
            raise
        return kb

    def _prepare(self) -> None:
        """Bring the schema and the catalog up to date (a read-only KB must already be)."""
        db = self._db
        try:
            if db.read_only:
                self._require_current_schema()
                return
            migrate(db)
            self._sync_catalog()
        except db.driver_error as exc:
            raise db.failure(exc) from exc

    def _require_current_schema(self) -> None:
        found = self._db.schema_version()
        if found != SCHEMA_VERSION:
            raise KBError(
                f"knowledge base {self._db.location} has schema version {found} and this role "
                f"may only read it; this kernelblaster needs version {SCHEMA_VERSION}: open it "
                "once with a role that may create and alter its tables (e.g. "
                "`kernelblaster kb stats --kb URL`), then read-only roles can use it"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- transactions ------------------------------------------------------------------------

    @contextmanager
    def write_transaction(self) -> Iterator[Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        if self._db.read_only:
            raise KBReadOnly(
                f"knowledge base {self._db.location} is read-only for this role: it can rank "
                "but not record; use a role with INSERT and UPDATE on its tables to learn"
            )
        with self._lock:
            try:
                self._db.begin(write=True)  # waits for other writers
                try:
                    yield self._db
                except BaseException:
                    self._db.rollback()
                    raise
                self._db.commit()
            except self._db.driver_error as exc:
                # e.g. SQLite's "attempt to write a readonly database": said as a KBError
                raise self._db.failure(exc) from exc

    @contextmanager
    def _snapshot(self) -> Iterator[Database]:
        """A read transaction, so several queries see one consistent state."""
        with self._lock:
            self._db.begin(write=False)
            try:
                yield self._db
            finally:
                self._db.commit()

    def _read(self, query: Callable[[Database], T]) -> T:
        """Run `query` in one read transaction."""
        with self._snapshot() as conn:
            return query(conn)

    def _apply(self, changes: Sequence[Change], *, queue_for: str | None = None) -> list[bool]:
        """Apply `changes` in one write transaction (True for each that changed the KB); with
        `queue_for`, also keep them in the outbox for that team KB, in the same transaction."""
        with self.write_transaction() as conn:
            applied = [rows.apply_change(conn, change) for change in changes]
            if queue_for is not None:
                outbox.push(conn, queue_for, changes)
            return applied

    # --- catalog -----------------------------------------------------------------------------

    def _sync_catalog(self) -> None:
        catalog = load_catalog()
        row = self._db.execute("SELECT value FROM meta WHERE key = 'catalog_digest'").fetchone()
        if row and row[0] == catalog.digest:
            return
        with self.write_transaction() as conn:
            for state in catalog.state:
                conn.execute(
                    "INSERT INTO states (id, bottleneck, description, arch) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET bottleneck = excluded.bottleneck, "
                    "description = excluded.description, arch = excluded.arch",
                    (state.id, state.bottleneck, state.description, state.arch),
                )
            for technique in catalog.technique:
                rows.put_technique(conn, technique, from_catalog=True)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('catalog_digest', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (catalog.digest,),
            )

    def _techniques(self, conn: Connection) -> dict[str, Technique]:
        """The techniques table, re-read only when its revision changed (rank() is hot)."""
        revision = rows.techniques_revision(conn)
        cached_conn, cached_revision, techniques = self._technique_cache
        if cached_conn is not conn or cached_revision != revision:
            techniques = rows.load_techniques(conn)
            self._technique_cache = (conn, revision, techniques)
        return techniques

    def techniques(self) -> list[Technique]:
        return self._read(lambda conn: list(self._techniques(conn).values()))

    def technique(self, technique_id: str) -> Technique | None:
        """The technique with this id, or None when the KB has no such entry."""
        return self._read(lambda conn: self._techniques(conn).get(technique_id))

    def states(self) -> list[State]:
        def query(conn: Connection) -> list[State]:
            found = conn.execute("SELECT id, bottleneck, description, arch FROM states ORDER BY id")
            return [State(id=r[0], bottleneck=r[1], description=r[2], arch=r[3]) for r in found]

        return self._read(query)

    def ensure_state(self, state: str, description: str = "") -> bool:
        """Add a state (e.g. one the state extractor proposed) if it is not known yet; True if
        it was added."""
        return self._apply([rows.new_state(state, description)])[0]

    # --- ranking -----------------------------------------------------------------------------

    def rank(
        self,
        arch: str,
        state: str,
        findings: Sequence[FindingLike] = (),
        *,
        source_hash: str | None = None,
    ) -> list[RankedTechnique]:
        """Techniques for `state` on `arch` (and the findings), best predicted speedup first;
        given the kernel's `source_hash`, its own attempts count first."""

        def query(conn: Connection):
            own = rows.kernel_counts(conn, state, arch, source_hash) if source_hash else None
            return (
                self._techniques(conn),
                {row.technique: row for row in rows.entry_rows(conn, arch=arch, state=state)},
                ranking.Learned(
                    *rows.finding_counts(conn, state, arch),
                    other_states=rows.other_state_counts(conn, state, arch),
                    this_kernel=own,
                ),
                rows.recent_notes(conn, arch, state),
                _statuses(rows.proposal_track(conn)),
            )

        techniques, here, learned, notes, proposals = self._read(query)
        return ranking.rank_all(techniques, arch, state, findings, here, learned, notes, proposals)

    # --- proposals (kb.proposals holds the operations the CLI and the view use) --------------

    def propose(self, proposal: Proposal) -> bool:
        """Add a proposed technique, or take a known proposal's newer decision; False when
        nothing changed (a proposal never replaces a catalog technique or an earlier proposal)."""
        return self._apply([proposal])[0]

    def proposals(self) -> list[Proposal]:
        """Every proposal, oldest first."""
        return self._read(rows.load_proposals)

    def proposal_track(self) -> dict[str, tuple[ProposalDecision | None, EntryCounts]]:
        """Per proposal: a user's decision and its attempts' counts (kb.proposal_status turns
        them into its status)."""
        return self._read(rows.proposal_track)

    # --- updates -----------------------------------------------------------------------------

    def record(self, attempt: Attempt) -> bool:
        """Store an attempt and update its entry's statistics in the same transaction. Unknown
        states and techniques are created. Returns False if this attempt id was already stored
        (recording it again changes nothing)."""
        validate_attempt(attempt)
        return self._apply([attempt])[0]

    def add_note(self, arch: str, state: str, technique: str, note: str) -> None:
        """Add a note to an entry's history; prompts see only the most recent few (bounded)."""
        text = clip_note(note)
        if not text:
            raise ValueError("a KB note must not be empty")
        entry = Note(
            id=uuid.uuid4().hex,
            arch=arch,
            state=state,
            technique=technique,
            time=time.time(),
            text=text,
        )
        self._apply([entry])

    def set_prior(
        self, arch: str, state: str, technique: str, predicted_speedup: float, reason: str
    ) -> None:
        """Set the prior gain of one entry (the policy update's ParameterUpdate)."""
        low, high = PRIOR_RANGE
        if not (math.isfinite(predicted_speedup) and low <= predicted_speedup <= high):
            raise ValueError(
                f"prior speedup must be within [{low}, {high}], got {predicted_speedup}"
            )
        if not reason.strip():
            raise ValueError("set_prior needs a reason saying where the prior comes from")
        prior = PriorOverride(
            arch=arch,
            state=state,
            technique=technique,
            prior_speedup=predicted_speedup,
            prior_source=reason.strip(),
            time=time.time(),
        )
        self._apply([prior])

    # --- reading -----------------------------------------------------------------------------

    def entry(self, arch: str, state: str, technique: str) -> EntryStats | None:
        found = self.entries(arch=arch, state=state, technique=technique)
        return found[0] if found else None

    def entries(
        self, *, arch: str | None = None, state: str | None = None, technique: str | None = None
    ) -> list[EntryStats]:
        def query(conn: Database):
            found = rows.entry_rows(conn, arch=arch, state=state, technique=technique)
            notes = {
                key: rows.recent_notes(conn, *key) for key in {(r.arch, r.state) for r in found}
            }
            return self._techniques(conn), found, notes

        techniques, found, notes = self._read(query)
        return [
            ranking.entry_stats(
                r, techniques.get(r.technique), notes[r.arch, r.state].get(r.technique, [])
            )
            for r in found
        ]

    def note_history(
        self, *, arch: str | None = None, state: str | None = None, technique: str | None = None
    ) -> list[Note]:
        """Every note ever added (oldest first), including those no longer shown to prompts."""
        return self._read(
            lambda conn: rows.load_notes(conn, arch=arch, state=state, technique=technique)
        )

    def attempts(
        self,
        *,
        arch: str | None = None,
        state: str | None = None,
        technique: str | None = None,
        source_hash: str | None = None,
        limit: int | None = None,
    ) -> list[Attempt]:
        """Recorded attempts, most recent first (`state` is the state before the attempt;
        `source_hash` the code_hash of the kernel it started from)."""
        clause, params = rows.where(
            arch=arch, before_state=state, technique=technique, source_hash=source_hash
        )
        sql = f"SELECT {rows.ATTEMPT_COLUMNS} FROM attempts{clause} ORDER BY time DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._read(
            lambda conn: [rows.attempt_from_row(row) for row in conn.execute(sql, params)]
        )

    def priors(self) -> list[PriorOverride]:
        """Priors set by the policy update (not derivable from attempts, so exported)."""
        return [
            PriorOverride(
                arch=r.arch,
                state=r.state,
                technique=r.technique,
                prior_speedup=r.prior_speedup,
                prior_source=r.prior_source or "",
                time=r.prior_time or r.updated,
            )
            for r in self._read(rows.entry_rows)
            if r.prior_speedup is not None
        ]

    def summary(self) -> KBSummary:
        return self._read(_summary)


def _statuses(
    track: dict[str, tuple[ProposalDecision | None, EntryCounts]],
) -> dict[str, ProposalStatus]:
    return {
        tid: proposal_status.status(*decided_counts)[0] for tid, decided_counts in track.items()
    }


def _summary(conn: Database) -> KBSummary:
    def count(sql: str) -> int:
        return conn.execute(sql).fetchone()[0]

    def grouped(column: str) -> dict[str, int]:
        found = conn.execute(
            f"SELECT {column}, count(*) AS n FROM attempts GROUP BY {column} "
            f"ORDER BY n DESC, {column}"
        )
        return dict(found.fetchall())

    prompt, completion = conn.execute(
        "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0) FROM attempts"
    ).fetchone()
    return KBSummary(
        path=str(conn.location),
        schema_version=conn.schema_version(),
        attempts=count("SELECT count(*) FROM attempts"),
        outcomes=grouped("outcome"),
        architectures=grouped("arch"),
        entries_with_attempts=count("SELECT count(*) FROM entries WHERE attempts > 0"),
        notes=count("SELECT count(*) FROM notes"),
        techniques=count("SELECT count(*) FROM techniques"),
        states=count("SELECT count(*) FROM states"),
        prompt_tokens=prompt,
        completion_tokens=completion,
    )
