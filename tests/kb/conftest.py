"""Fixtures for the knowledge-base tests: every test that uses a KB runs on both back ends, a
fresh SQLite file and a fresh database on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kernelblaster.kb.store import KnowledgeBase

NewLocation = Callable[[str], Path | str]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def new_location(request, backend: str, tmp_path: Path) -> NewLocation:
    """Makes a fresh, empty KB location on this test's back end: a file path, or the URL of a
    new database."""
    if backend == "sqlite":
        return lambda name: tmp_path / f"{name}.sqlite3"
    server = request.getfixturevalue("postgres_server")
    return lambda name: server.url(server.create_database(name))


@pytest.fixture
def kb_location(new_location: NewLocation) -> Path | str:
    return new_location("kb")


@pytest.fixture
def kb(kb_location):
    with KnowledgeBase.open(kb_location) as opened:
        yield opened
