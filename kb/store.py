"""The per-user knowledge base: an SQLite file (WAL) shared by every editor window and CLI run.

Every write is one `BEGIN IMMEDIATE` transaction, so an attempt and the statistics it changes
land together or not at all, concurrent writers queue on `busy_timeout` instead of failing, and
a process killed mid-write leaves only what was committed.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import platformdirs

from kernelblaster.kb import ranking, rows
from kernelblaster.kb.catalog import load_catalog
from kernelblaster.kb.records import (
    Attempt,
    EntryStats,
    FindingLike,
    KBSummary,
    Note,
    PriorOverride,
    RankedTechnique,
    State,
    Technique,
    clip_note,
)
from kernelblaster.kb.schema import KBError, check_file, migrate
from kernelblaster.kb.stats import validate_attempt

BUSY_TIMEOUT_S = 30.0
PRIOR_RANGE = (0.1, 10.0)


def default_path(settings_kb_path: str | None = None) -> Path:
    """KERNELBLASTER_KB, else the `kb_path` setting, else the platform's per-user data dir."""
    chosen = os.environ.get("KERNELBLASTER_KB") or settings_kb_path
    if chosen:
        return Path(chosen).expanduser()
    return Path(platformdirs.user_data_dir("kernelblaster", appauthor=False)) / "kb.sqlite3"


class KBUnwritableError(KBError):
    """The KB's file or folder can't be written (read-only, or no permission): a fresh KB
    beside it couldn't be written either."""


def _unwritable(path: Path, exc: sqlite3.OperationalError) -> KBUnwritableError:
    return KBUnwritableError(
        f"knowledge base {path} can't be opened for writing ({exc}): the file or its folder is "
        "read-only or not yours. Make both writable, or set kb_path / KERNELBLASTER_KB to a "
        "file in a writable folder"
    )


def open_or_fallback(path: Path | str | None) -> tuple[KnowledgeBase, str | None]:
    """Open the KB at `path`; if it is corrupt or foreign, leave it untouched and open a fresh KB
    beside it, returning a message that says so (None when the original opened). A KB that
    can't be written raises KBUnwritableError."""
    path = Path(path) if path is not None else default_path()
    try:
        return KnowledgeBase.open(path), None
    except KBUnwritableError:
        raise
    except KBError as exc:
        fallback = path.with_name(f"{path.stem}.fresh{path.suffix or '.sqlite3'}")
        kb = KnowledgeBase.open(fallback)
        return kb, f"{exc}. Using a fresh knowledge base at {fallback} until that is resolved."


class KnowledgeBase:
    def __init__(self, connection: sqlite3.Connection, path: Path):
        self.path = path
        self._conn = connection
        self._lock = threading.RLock()  # one connection, shared by the server's threads
        self._technique_cache: tuple[int, dict[str, Technique]] = (-1, {})

    @classmethod
    def open(cls, path: Path | str | None = None) -> KnowledgeBase:
        path = Path(path) if path is not None else default_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KBUnwritableError(
                f"the folder of the knowledge base {path} can't be created "
                f"({exc.strerror or exc}); set kb_path / KERNELBLASTER_KB to a writable place"
            ) from exc
        check_file(path)
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.OperationalError as exc:
            raise _unwritable(path, exc) from exc
        kb = cls(conn, path)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a committed attempt survives power loss
            migrate(conn, lambda: conn.execute("BEGIN IMMEDIATE"))
            kb._sync_catalog()
        except sqlite3.OperationalError as exc:
            conn.close()
            raise _unwritable(path, exc) from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise KBError(f"knowledge base {path} can't be used: {exc}") from exc
        return kb

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- transactions ------------------------------------------------------------------------

    @contextmanager
    def write_transaction(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: committed when the block ends, rolled back if it
        raises."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")  # waits up to busy_timeout for the lock
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so several queries see one consistent state."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    # --- catalog -----------------------------------------------------------------------------

    def _sync_catalog(self) -> None:
        catalog = load_catalog()
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'catalog_digest'").fetchone()
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
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('catalog_digest', ?)",
                (catalog.digest,),
            )

    def _techniques(self, conn: sqlite3.Connection) -> dict[str, Technique]:
        """The techniques table, re-read only when its revision changed (rank() is hot)."""
        revision = rows.techniques_revision(conn)
        if self._technique_cache[0] != revision:
            self._technique_cache = (revision, rows.load_techniques(conn))
        return self._technique_cache[1]

    def techniques(self) -> list[Technique]:
        with self._snapshot() as conn:
            return list(self._techniques(conn).values())

    def states(self) -> list[State]:
        with self._snapshot() as conn:
            found = conn.execute("SELECT id, bottleneck, description, arch FROM states ORDER BY id")
            return [State(id=r[0], bottleneck=r[1], description=r[2], arch=r[3]) for r in found]

    def ensure_state(self, state: str, description: str = "") -> bool:
        """Add a state (e.g. one the state extractor proposed) if it is not known yet; True if
        it was added."""
        with self.write_transaction() as conn:
            return rows.ensure_state(conn, state, description)

    # --- ranking -----------------------------------------------------------------------------

    def rank(
        self, arch: str, state: str, findings: Sequence[FindingLike] = ()
    ) -> list[RankedTechnique]:
        """Techniques for `state` on `arch` (and the findings), best predicted speedup first."""
        with self._snapshot() as conn:
            techniques = self._techniques(conn)
            here = {row.technique: row for row in rows.entry_rows(conn, arch=arch, state=state)}
            pooled = rows.pooled_counts(conn, state, exclude_arch=arch)
            notes = rows.recent_notes(conn, arch, state)
        return ranking.rank_all(techniques, arch, state, findings, here, pooled, notes)

    # --- updates -----------------------------------------------------------------------------

    def record(self, attempt: Attempt) -> bool:
        """Store an attempt and update its entry's statistics in the same transaction. Unknown
        states and techniques are created. Returns False if this attempt id was already stored
        (recording it again changes nothing)."""
        validate_attempt(attempt)
        with self.write_transaction() as conn:
            return rows.record_in(conn, attempt)

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
        with self.write_transaction() as conn:
            rows.insert_note(conn, entry)

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
        now = time.time()
        with self.write_transaction() as conn:
            rows.ensure_entry(conn, arch, state, technique)
            conn.execute(
                "UPDATE entries SET prior_speedup = ?, prior_source = ?, prior_time = ?, "
                "updated = ? WHERE arch = ? AND state = ? AND technique = ?",
                (predicted_speedup, reason.strip(), now, now, arch, state, technique),
            )

    # --- reading -----------------------------------------------------------------------------

    def entry(self, arch: str, state: str, technique: str) -> EntryStats | None:
        found = self.entries(arch=arch, state=state, technique=technique)
        return found[0] if found else None

    def entries(
        self, *, arch: str | None = None, state: str | None = None, technique: str | None = None
    ) -> list[EntryStats]:
        with self._snapshot() as conn:
            techniques = self._techniques(conn)
            found = rows.entry_rows(conn, arch=arch, state=state, technique=technique)
            notes = {
                key: rows.recent_notes(conn, *key) for key in {(r.arch, r.state) for r in found}
            }
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
        with self._snapshot() as conn:
            return rows.load_notes(conn, arch=arch, state=state, technique=technique)

    def attempts(
        self,
        *,
        arch: str | None = None,
        state: str | None = None,
        technique: str | None = None,
        limit: int | None = None,
    ) -> list[Attempt]:
        """Recorded attempts, most recent first (`state` is the state before the attempt)."""
        clause, params = rows.where(arch=arch, before_state=state, technique=technique)
        sql = f"SELECT {rows.ATTEMPT_COLUMNS} FROM attempts{clause} ORDER BY time DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._snapshot() as conn:
            return [rows.attempt_from_row(row) for row in conn.execute(sql, params)]

    def priors(self) -> list[PriorOverride]:
        """Priors set by the policy update (not derivable from attempts, so exported)."""
        with self._snapshot() as conn:
            found = rows.entry_rows(conn)
        return [
            PriorOverride(
                arch=r.arch,
                state=r.state,
                technique=r.technique,
                prior_speedup=r.prior_speedup,
                prior_source=r.prior_source or "",
                time=r.prior_time or r.updated,
            )
            for r in found
            if r.prior_speedup is not None
        ]

    def summary(self) -> KBSummary:
        with self._snapshot() as conn:

            def count(sql: str) -> int:
                return conn.execute(sql).fetchone()[0]

            def grouped(column: str) -> dict[str, int]:
                found = conn.execute(
                    f"SELECT {column}, count(*) AS n FROM attempts GROUP BY {column} "
                    f"ORDER BY n DESC, {column}"
                )
                return dict(found.fetchall())

            prompt, completion = conn.execute(
                "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0) "
                "FROM attempts"
            ).fetchone()
            return KBSummary(
                path=str(self.path),
                schema_version=conn.execute("PRAGMA user_version").fetchone()[0],
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
