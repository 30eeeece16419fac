"""Fixtures for the agent tests: clients pointed at the scripted OpenAI-compatible server
(tests/conftest.py's `openai_server`), and a fresh knowledge base."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.openai_server import FAKE_KEY, OpenAITestServer
from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.kb.store import KnowledgeBase


@pytest.fixture
def make_client(openai_server: OpenAITestServer) -> Callable[..., LlmClient]:
    """A client for the test server with test-sized timeouts and backoff; override any field."""

    def make(*, api_key: str | None = FAKE_KEY, **overrides: Any) -> LlmClient:
        fields: dict[str, Any] = {
            "base_url": openai_server.base_url,
            "model": "test-model",
            "api_key_env": "KERNELBLASTER_TEST_NO_SUCH_VAR",
            "timeout_s": 1.0,
            "max_retries": 2,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.05,
        }
        fields.update(overrides)
        return LlmClient(LlmConfig(**fields), api_key=api_key)

    return make


@pytest.fixture
def client(make_client: Callable[..., LlmClient]) -> LlmClient:
    return make_client()


@pytest.fixture
def kb(tmp_path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as store:
        yield store
