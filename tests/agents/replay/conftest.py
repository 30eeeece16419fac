"""Fixtures for the learning environment's tests: the real task library and a hand-made table
over part of it (fixture_table.py: invented numbers, clearly a fixture)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kernelblaster.agents.replay.mode import ReplayTask
from kernelblaster.agents.replay.table import LearningTable, Task, load_library, write_table
from kernelblaster.kb.store import KnowledgeBase
from tests.agents.replay.fixture_table import LIBRARY, fixture_table


@pytest.fixture(scope="session")
def library() -> list[Task]:
    return load_library(LIBRARY)


@pytest.fixture(scope="session")
def table() -> LearningTable:
    return fixture_table()


@pytest.fixture
def table_path(tmp_path, table) -> Path:
    path = tmp_path / "learning-table-fixture.json"
    write_table(path, table)
    return path


@pytest.fixture
def kb(tmp_path):
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as store:
        yield store


@pytest.fixture
def replay_of(library, table):
    def make(name: str, seed: int = 0) -> ReplayTask:
        task = next(t for t in library if t.task == name)
        return ReplayTask(task, table, rng=random.Random(seed))

    return make
