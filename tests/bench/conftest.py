"""Fixtures for the bench's own tests: the learning environment's (the real task library, the
fixture table over part of it, a fresh KB), shared with the replay mode's tests."""

from tests.agents.replay.conftest import kb, library, replay_of, table, table_path  # noqa: F401
