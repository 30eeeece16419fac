"""Fixtures for the knowledge-base tests: a fresh KB file per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.kb.store import KnowledgeBase


@pytest.fixture
def kb_path(tmp_path: Path) -> Path:
    return tmp_path / "kb.sqlite3"


@pytest.fixture
def kb(kb_path: Path):
    with KnowledgeBase.open(kb_path) as opened:
        yield opened
