"""What the knowledge base needs from a database, whichever it is: SQLite (a file, the embedded
default) or PostgreSQL (a team's shared server, given as a `postgresql://` URL).

Both back ends run the same SQL (kb.rows, kb.transfer, kb.outbox), written with `?` placeholders
in the dialect the two share. What differs lives in the two implementations of `Database`
(kb.sqlite_db, kb.postgres_db): how to connect, how a write transaction excludes other writers,
where the schema version is kept, and how the DDL's column types are spelled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from kernelblaster.kb.schema import KBError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
PASSWORD_HINT = (
    "give the password through PGPASSWORD, a password file (~/.pgpass or PGPASSFILE) or a "
    "service file (PGSERVICEFILE), never in settings"
)


class KBUnreachable(KBError):
    """The KB's server can't be reached (down, network gone, connection lost mid-transaction)."""


class KBReadOnly(KBError):
    """The KB may be read but not written (e.g. a read-only PostgreSQL role)."""


class KBUnwritableError(KBError):
    """The KB's file or folder can't be written (read-only, or no permission): a fresh KB
    beside it couldn't be written either."""


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the SQL helpers (kb.rows, kb.transfer, kb.outbox) run their statements on."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...


class Database(Connection, Protocol):
    # What messages and `kb path` show: the file, or the server's URL (which never holds a
    # password: one with a password is refused before connecting).
    location: Path | str
    read_only: bool
    driver_error: type[Exception]  # the driver's base error, reported as a KBError on open

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


def is_postgres_url(location: Path | str) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def password_problem(location: str) -> str | None:
    """What is wrong with a team KB URL that carries a password (in its user part or as a
    parameter such as `password` or `sslpassword`); None for any other location. The message
    never repeats the URL."""
    if not is_postgres_url(location):
        return None
    parts = urlsplit(location)
    parameters = [name for name in parse_qs(parts.query) if "password" in name.lower()]
    if parts.password is None and not parameters:
        return None
    return f"the knowledge base URL contains a password: remove it and {PASSWORD_HINT}"


def open_database(location: Path | str) -> Database:
    """The database at `location`: a PostgreSQL URL, else an SQLite file path."""
    if is_postgres_url(location):
        from kernelblaster.kb.postgres_db import PostgresDatabase  # psycopg only when used

        database = PostgresDatabase(str(location))
        database.connect()
        return database
    from kernelblaster.kb.sqlite_db import SQLiteDatabase

    return SQLiteDatabase.open(Path(location))
