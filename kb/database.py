"""What the knowledge base needs from a database: SQLite (a file, the default) or PostgreSQL (a
team's server, a `postgresql://` URL). Both run the same SQL with `?` placeholders; the two
`Database` implementations hold what differs (connecting, excluding other writers, the schema
version, the DDL's column types)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from kernelblaster.kb.schema import KBError


class KBUnreachable(KBError):
    """The KB's server can't be reached (down, network gone, connection lost mid-transaction)."""


class KBReadOnly(KBError):
    """The KB may be read but not written (e.g. a read-only PostgreSQL role)."""


class KBUnwritableError(KBError):
    """The KB's file or folder can't be written (read-only, or no permission): a fresh KB
    beside it couldn't be written either."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the SQL helpers (kb.rows, kb.transfer, kb.outbox) run their statements on."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...


class Database(Connection, Protocol):
    read_only: bool

    @property
    def location(self) -> Path | str:
        """What messages and `kb path` show: the file, or the server's URL (which never holds a
        password: one with a password is refused before connecting)."""

    @property
    def driver_error(self) -> type[Exception]:
        """The driver's base error, reported as a KBError on open."""

    def begin(self, *, write: bool) -> None:
        """Start a transaction; a write transaction waits until no other writer holds one."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def schema_version(self) -> int:
        """0 for a database the KB has never touched."""

    def set_schema_version(self, version: int) -> None:
        """Record the version, inside the migration's write transaction."""

    def ddl(self, script: str) -> str:
        """The schema script (written for SQLite) in this database's types."""

    def failure(self, exc: Exception) -> KBError:
        """What to report for a driver error while the KB is being prepared (migrated)."""

    def close(self) -> None: ...
