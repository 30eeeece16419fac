"""Where a knowledge base lives: a file path, or a team's PostgreSQL URL, which must never carry a
password. Below every layer, since settings validate `kb_path` with it before any KB is opened."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
PASSWORD_HINT = (
    "give the password through PGPASSWORD, a password file (~/.pgpass or PGPASSFILE) or a "
    "service file (PGSERVICEFILE), never in settings"
)


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
