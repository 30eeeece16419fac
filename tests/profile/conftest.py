"""`analyze` and `profile` rank each kernel with the user's knowledge base: here, a fresh one per
test, never the real user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fresh_kb(tmp_path, monkeypatch):
    path = tmp_path / "kb.sqlite3"
    monkeypatch.setenv("KERNELBLASTER_KB", str(path))
    return path
