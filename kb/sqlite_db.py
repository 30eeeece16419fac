"""The embedded back end: one SQLite file (WAL), shared by every editor window and CLI run.

A write transaction is `BEGIN IMMEDIATE`: it takes the file's write lock at once, so concurrent
writers queue on `busy_timeout` instead of failing, and a process killed mid-write leaves only
what was committed. `PRAGMA user_version` holds the schema version and `PRAGMA application_id`
marks the file as ours.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelblaster.folders import KB_FIX, FolderError, made_folder
from kernelblaster.kb.database import KBUnwritableError
from kernelblaster.kb.schema import APPLICATION_ID, KBError, check_file

BUSY_TIMEOUT_S = 30.0


class SQLiteDatabase:
    driver_error = sqlite3.DatabaseError
    read_only = False

    def __init__(self, connection: sqlite3.Connection, path: Path):
        self.location = path
        self._conn = connection

    @classmethod
    def open(cls, path: Path) -> SQLiteDatabase:
        try:
            made_folder(path.parent, fix=KB_FIX, writable=False)  # read-only: said below
        except FolderError as exc:
            raise KBUnwritableError(f"the knowledge base {path}: {exc}") from exc
        check_file(path)
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.OperationalError as exc:
            raise _unwritable(path, exc) from exc
        database = cls(conn, path)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a committed attempt survives power loss
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise database.failure(exc) from exc
        return database

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, params)

    def begin(self, *, write: bool) -> None:
        self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        self._conn.execute("ROLLBACK")

    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def set_schema_version(self, version: int) -> None:
        self._conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        self._conn.execute(f"PRAGMA user_version = {int(version)}")

    def ddl(self, script: str) -> str:
        return script  # the schema is written in SQLite's types

    def failure(self, exc: Exception) -> KBError:
        if isinstance(exc, sqlite3.OperationalError):  # e.g. "attempt to write a readonly database"
            return _unwritable(self.location, exc)
        return KBError(f"knowledge base {self.location} can't be used: {exc}")

    def close(self) -> None:
        self._conn.close()


def _unwritable(path: Path, exc: sqlite3.OperationalError) -> KBUnwritableError:
    return KBUnwritableError(
        f"knowledge base {path} can't be opened for writing ({exc}): the file or its folder is "
        "read-only or not yours. Make both writable, or set kb_path / KERNELBLASTER_KB to a "
        "file in a writable folder"
    )
