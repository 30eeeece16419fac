"""The team back end: one PostgreSQL database shared by a team, through psycopg 3 with a
`postgresql://` URL (docs/knowledge-base.md, "A team knowledge base"). Credentials come only from
libpq's own sources: a URL carrying a password is refused, so none sits in settings or logs. A
write takes one advisory lock, so writers queue as on SQLite. Types follow SQLite's (DOUBLE
PRECISION for REAL, "C" collation), so both back ends order alike. A role without INSERT reads
only; a lost server becomes KBUnreachable."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kernelblaster.kb.database import KBReadOnly, KBUnreachable
from kernelblaster.kb.schema import OUR_TABLES, KBError
from kernelblaster.kb_location import PASSWORD_HINT, password_problem

if TYPE_CHECKING:
    import psycopg

ADVISORY_LOCK_KEY = 0x4B424B42  # "KBKB", like the SQLite file's application_id
# How long to wait for a server that doesn't answer, unless the URL or PGCONNECT_TIMEOUT says.
CONNECT_TIMEOUT_S = 5
# How long sent data may stay unacknowledged before the connection counts as lost (ms), so a
# server that vanished mid-query is noticed in seconds rather than TCP's many minutes.
TCP_USER_TIMEOUT_MS = 15_000
_DDL_TYPES = [
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bTEXT\b"), 'TEXT COLLATE "C"'),
    # v2 gave each note carried over from v1 a random id; a new PostgreSQL database has none
    (re.compile(re.escape("lower(hex(randomblob(16)))")), "md5(random()::text)"),
]


class PostgresDatabase:
    def __init__(self, url: str):
        if problem := password_problem(url):
            raise KBError(problem)
        self.location = url
        self.read_only = False
        self._conn: psycopg.Connection | None = None

    @property
    def driver_error(self) -> type[Exception]:
        import psycopg

        return psycopg.Error

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def connect(self) -> None:
        """Connect (again); KBUnreachable if the server can't be reached, KBError if it refuses
        us (authentication)."""
        import psycopg

        self.close()
        try:
            self._conn = psycopg.connect(self.location, autocommit=True, **_defaults(self.location))
        except psycopg.OperationalError as exc:
            reason = _one_line(exc)
            if "password" in reason or "authentication" in reason:
                raise KBError(
                    f"the team knowledge base at {self.location} refused the login ({reason}); "
                    + PASSWORD_HINT
                ) from exc
            raise KBUnreachable(
                f"the team knowledge base at {self.location} can't be reached ({reason})"
            ) from exc
        self.read_only = not self._value(
            "SELECT CASE WHEN to_regclass('attempts') IS NULL "
            "THEN coalesce(has_schema_privilege(current_schema(), 'CREATE'), false) "
            "ELSE has_table_privilege(to_regclass('attempts'), 'INSERT') END"
        )

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor:
        import psycopg

        if self._conn is None:
            raise KBUnreachable(f"the team knowledge base at {self.location} is not connected")
        try:
            # The shared SQL uses `?`; psycopg wants `%s` (and a literal % doubled).
            return self._conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise KBReadOnly(
                f"the team knowledge base at {self.location} is read-only for this role "
                f"({_one_line(exc)})"
            ) from exc
        except psycopg.OperationalError as exc:
            self.close()  # the next use reconnects
            raise KBUnreachable(
                f"lost the team knowledge base at {self.location} ({_one_line(exc)})"
            ) from exc

    def _value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The one value of a query that always returns one row (a SELECT without FROM)."""
        row = self.execute(sql, params).fetchone()
        if row is None:
            raise KBError(f"the team knowledge base at {self.location} returned no row for {sql}")
        return row[0]

    def begin(self, *, write: bool) -> None:
        if write:
            self.execute("BEGIN")
            self.execute("SELECT pg_advisory_xact_lock(?)", (ADVISORY_LOCK_KEY,))
        else:
            self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        if self.connected:  # a lost connection's transaction is already gone with it
            self.execute("ROLLBACK")

    def schema_version(self) -> int:
        if self._value("SELECT to_regclass('meta')") is None:
            clashing = [
                name
                for name in sorted(OUR_TABLES)
                if self._value("SELECT to_regclass(?)", (name,)) is not None
            ]
            if clashing:
                raise self._foreign(clashing)
            return 0
        row = self.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            raise self._foreign(["meta"])
        return int(row[0])

    def set_schema_version(self, version: int) -> None:
        self.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(version),),
        )

    def ddl(self, script: str) -> str:
        for pattern, replacement in _DDL_TYPES:
            script = pattern.sub(replacement, script)
        return script

    def failure(self, exc: Exception) -> KBError:
        return KBError(f"knowledge base {self.location} can't be used: {_one_line(exc)}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _foreign(self, tables: list[str]) -> KBError:
        return KBError(
            f"the database at {self.location} has tables of another application "
            f"({', '.join(tables)}) where the knowledge base's would go; they were left "
            "untouched: give the KB its own database, or its own schema (e.g. "
            "?options=-csearch_path%3Dkernelblaster in the URL)"
        )


def _defaults(url: str) -> dict[str, Any]:
    """Connection parameters we default, unless the URL or the environment sets them."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(url)
    defaults: dict[str, Any] = {"application_name": "kernelblaster"}
    if "connect_timeout" not in given and "PGCONNECT_TIMEOUT" not in os.environ:
        defaults["connect_timeout"] = CONNECT_TIMEOUT_S
    if "tcp_user_timeout" not in given:
        defaults["tcp_user_timeout"] = TCP_USER_TIMEOUT_MS
    return {name: value for name, value in defaults.items() if name not in given}


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
