"""A team KB (PostgreSQL) that keeps working while its server is unreachable: reads and writes go to
the local SQLite KB, and each change also into its outbox, sent in one server transaction once
the server answers (retried every RETRY_S). Every change is idempotent, so an outbox sent twice
counts nothing twice. A read-only role ranks from the server and learns only locally."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from kernelblaster.kb import outbox
from kernelblaster.kb.database import Database, KBUnreachable
from kernelblaster.kb.postgres_db import PostgresDatabase
from kernelblaster.kb.records import Change
from kernelblaster.kb.store import KnowledgeBase

RETRY_S = 30.0  # how long to work locally before trying an unreachable server again

T = TypeVar("T")


class TeamKnowledgeBase(KnowledgeBase):
    _db: PostgresDatabase

    def __init__(self, db: PostgresDatabase, local: KnowledgeBase):
        super().__init__(db)
        self.local = local
        self.problem: str | None = None  # why the server is not in use, while it is not
        self._retry_at = 0.0  # when to try an unreachable server again (monotonic clock)
        self._outbox_due = 0.0  # when to look at the outbox again

    @classmethod
    def connect(cls, url: str, local_path: Path) -> tuple[TeamKnowledgeBase, str | None]:
        """The team KB at `url`, with `local_path` as its local fallback and outbox; and a
        message when the server can't be reached now. KBError if the server refuses us or the
        database isn't usable (a password in the URL, a refused login, foreign tables)."""
        db = PostgresDatabase(url)
        kb = cls(db, KnowledgeBase.open(local_path))
        try:
            db.connect()
            kb._prepare()
            kb._send_outbox()
        except KBUnreachable as exc:
            kb._lost(exc)
            kb._retry_at = time.monotonic() + RETRY_S
            return kb, (
                f"{exc}; what is learned meanwhile is kept in {kb.local.path} and sent when it "
                "is back"
            )
        except BaseException:
            kb.close()
            raise
        return kb, None

    def close(self) -> None:
        super().close()
        self.local.close()

    def waiting(self) -> int:
        """How many changes wait in the outbox (after trying to send them)."""
        self._reachable()
        return len(self.local._read(lambda conn: outbox.pending(conn, self._db.location)))

    # --- where each call goes ----------------------------------------------------------------

    def _read(self, query: Callable[[Database], T]) -> T:
        return self._server_or_local(
            lambda: KnowledgeBase._read(self, query), lambda: self.local._read(query)
        )

    def _apply(self, changes: Sequence[Change], *, queue_for: str | None = None) -> list[bool]:
        if self._reachable() and self._db.read_only:
            return self.local._apply(changes)  # a read-only role learns only locally
        return self._server_or_local(
            lambda: KnowledgeBase._apply(self, changes),
            lambda: self.local._apply(changes, queue_for=self._db.location),
        )

    def _server_or_local(self, on_server: Callable[[], T], locally: Callable[[], T]) -> T:
        """`on_server()` while the server answers (a connection lost mid-call is tried again at
        once: the server may just have restarted), else `locally()`."""
        for _ in range(2):
            if not self._reachable():
                break
            try:
                return on_server()
            except KBUnreachable as exc:
                self._lost(exc)
        return locally()

    def _reachable(self) -> bool:
        """Whether the server can be used now. Reconnects when due, and sends the outbox on
        reconnecting and every RETRY_S seconds (another process sharing the local KB may have
        left changes there)."""
        with self._lock:
            now = time.monotonic()
            if self._db.connected and now < self._outbox_due:
                return True
            if not self._db.connected and now < self._retry_at:
                return False
            try:
                if not self._db.connected:
                    self._db.connect()
                    self._prepare()
                self._send_outbox()
            except KBUnreachable as exc:
                self._lost(exc)
                self._retry_at = now + RETRY_S
                return False
            self._outbox_due = now + RETRY_S
            self.problem = None
            return True

    def _lost(self, exc: KBUnreachable) -> None:
        self._db.close()
        self.problem = str(exc)

    def _send_outbox(self) -> None:
        """Send what was learned while the server was unreachable, then clear it locally."""
        target = self._db.location
        waiting = self.local._read(lambda conn: outbox.pending(conn, target))
        if not waiting or self._db.read_only:
            return
        KnowledgeBase._apply(self, [item.change for item in waiting])  # to the server
        with self.local.write_transaction() as conn:
            outbox.remove(conn, target, waiting)
