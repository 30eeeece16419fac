"""Connecting to a knowledge base's database, whichever it is: a PostgreSQL server for a URL,
else an SQLite file. Its own module so that neither back end imports the other's chooser."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.kb.database import Database
from kernelblaster.kb_location import is_postgres_url


def open_database(location: Path | str) -> Database:
    """The database at `location`: a PostgreSQL URL, else an SQLite file path."""
    if is_postgres_url(location):
        from kernelblaster.kb.postgres_db import PostgresDatabase  # psycopg only when used

        database = PostgresDatabase(str(location))
        database.connect()
        return database
    from kernelblaster.kb.sqlite_db import SQLiteDatabase

    return SQLiteDatabase.open(Path(location))
