"""LlmClient against a real HTTP server: replies, usage, retries, and every error kind."""

from __future__ import annotations

import logging
import math
import socket
import time
from types import SimpleNamespace

import pytest

from bench.openai_server import (
    FAKE_KEY,
    HttpError,
    OpenAITestServer,
    RawBody,
    delayed,
    rate_limited,
    reply,
    server_error,
)
from kernelblaster.agents.llm import client as client_module
from kernelblaster.agents.llm.client import (
    LOCAL_PLACEHOLDER_KEY,
    LlmClient,
    LlmConfig,
    LlmError,
    Usage,
)
from kernelblaster.settings import Settings

HELLO = [{"role": "user", "content": "Say hello to the kernel."}]


def test_reply_usage_and_request_shape(openai_server, client):
    openai_server.push(reply("hello, kernel", usage=(123, 7)))
    answer = client.chat(HELLO, purpose="lowering", temperature=0.1, max_tokens=64)

    assert answer.text == "hello, kernel"
    assert answer.usage == Usage(prompt_tokens=123, completion_tokens=7, estimated=False)
    assert answer.finish_reason == "stop"
    assert answer.model == "test-model"
    assert client.usage_log == [("lowering", answer.usage)]
    (request,) = openai_server.chat_requests
    assert request.body["model"] == "test-model"
    assert request.body["messages"] == HELLO
    assert request.body["temperature"] == 0.1
    assert request.body["max_tokens"] == 64
    assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"


def test_missing_usage_is_estimated_from_characters(openai_server, client):
    text = "x" * 41
    openai_server.push(reply(text, usage=None))
    answer = client.chat(HELLO, purpose="soft_verify")
    assert answer.usage.estimated
    assert answer.usage.completion_tokens == math.ceil(41 / 4)
    assert answer.usage.prompt_tokens == math.ceil(len(HELLO[0]["content"]) / 4)


def test_usage_is_totalled_by_purpose(openai_server, client):
    openai_server.push(reply("a", usage=(10, 1)), reply("b", usage=(20, 2)), reply("c", usage=None))
    client.chat(HELLO, purpose="lowering")
    client.chat(HELLO, purpose="lowering")
    client.chat(HELLO, purpose="soft_verify")
    totals = client.usage_by_purpose()
    assert totals["lowering"] == Usage(prompt_tokens=30, completion_tokens=3)
    assert totals["soft_verify"].estimated
    assert [purpose for purpose, _ in client.usage_log] == ["lowering", "lowering", "soft_verify"]


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The client's waits between attempts, recorded instead of slept: what it waited for is
    asserted, not how long the test took."""
    waited: list[float] = []
    monkeypatch.setattr(client_module, "time", SimpleNamespace(sleep=waited.append, time=time.time))
    return waited


def test_429_honours_retry_after_then_succeeds(openai_server, make_client, waits):
    client = make_client(max_retries=3, backoff_base_s=0.01)
    openai_server.push(rate_limited(retry_after="1"), reply("finally"))
    answer = client.chat(HELLO, purpose="lowering")
    assert answer.text == "finally"
    assert len(openai_server.chat_requests) == 2
    assert waits == [1.0]  # Retry-After's second, not the ~0.01 s backoff


def test_429_retry_after_ms_is_preferred(openai_server, make_client, waits):
    client = make_client(max_retries=1, backoff_base_s=5.0, backoff_max_s=5.0)
    openai_server.push(rate_limited(retry_after=None, retry_after_ms="200"), reply("ok"))
    assert client.chat(HELLO, purpose="lowering").text == "ok"
    assert waits == [0.2]  # not the 2.5-5 s exponential backoff


def test_persistent_429_ends_as_rate_limited(openai_server, make_client):
    client = make_client(max_retries=1)
    openai_server.push(rate_limited(retry_after="0"), rate_limited(retry_after="0"))
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "rate_limited"
    assert "llmMaxRetries" in caught.value.message
    assert "gave up after 2 attempts" in caught.value.message
    assert len(openai_server.chat_requests) == 2


def test_5xx_exhausts_bounded_retries(openai_server, make_client):
    client = make_client(max_retries=2)
    openai_server.push(server_error(500), server_error(502), server_error(503), reply("unused"))
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "bad_response"
    assert "HTTP 503" in caught.value.message
    assert "gave up after 3 attempts" in caught.value.message
    assert len(openai_server.chat_requests) == 3  # 1 + max_retries, the 4th entry never asked
    assert client.usage_log == []


def test_5xx_then_success(openai_server, client):
    openai_server.push(server_error(500), reply("recovered"))
    assert client.chat(HELLO, purpose="lowering").text == "recovered"
    assert len(openai_server.chat_requests) == 2


def test_503_honours_retry_after(openai_server, make_client, waits):
    client = make_client(max_retries=1, backoff_base_s=0.01)
    openai_server.push(server_error(503, {"retry-after-ms": "300"}), reply("back"))
    assert client.chat(HELLO, purpose="lowering").text == "back"
    assert waits == [0.3]


def test_client_errors_are_not_retried(openai_server, client):
    openai_server.push(HttpError(400, "This model's maximum context length is 8192 tokens"))
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "bad_response"
    assert "HTTP 400: This model's maximum context length" in caught.value.message
    assert len(openai_server.chat_requests) == 1


def test_timeout_is_retried_then_reported(openai_server, make_client):
    client = make_client(timeout_s=0.3, max_retries=1)
    openai_server.push(delayed(5), delayed(5))
    started = time.monotonic()
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "timeout"
    assert "llmTimeoutS" in caught.value.message
    assert len(openai_server.chat_requests) == 2
    assert time.monotonic() - started < 3.0


def test_unreachable_port_fails_fast_with_fix(waits):
    with socket.socket() as probe:  # a port nothing listens on once the socket is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    client = LlmClient(LlmConfig(base_url=url, model="m", timeout_s=1.0, max_retries=3))
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "unreachable"
    assert caught.value.message == f"cannot reach {url}: is the server running? set llmBaseUrl"
    assert waits == []  # a refused connection is not retried


def test_model_not_found_lists_served_models(openai_server, make_client):
    client = make_client(model="no-such-model")
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "model_not_found"
    assert "'no-such-model' not found at" in caught.value.message
    assert "set llmModel" in caught.value.message
    assert "test-model" in caught.value.message  # from GET /v1/models
    assert [r.method for r in openai_server.requests] == ["POST", "GET"]


def test_wrong_base_path_says_to_fix_the_url(openai_server, make_client):
    client = make_client(base_url=f"http://127.0.0.1:{openai_server.port}")
    with pytest.raises(LlmError) as caught:
        client.chat(HELLO, purpose="lowering")
    assert caught.value.kind == "unreachable"
    assert "/v1" in caught.value.message and "llmBaseUrl" in caught.value.message


def test_non_json_body_is_a_bad_response(openai_server, client):
    openai_server.push(RawBody("<html>proxy error</html>"), RawBody('{"object": "nothing"}'))
    for _ in range(2):
        with pytest.raises(LlmError) as caught:
            client.chat(HELLO, purpose="lowering")
        assert caught.value.kind == "bad_response"
        assert "chat-completions endpoint" in caught.value.message
    assert len(openai_server.chat_requests) == 2  # not retried


def test_list_models(openai_server, client):
    assert client.list_models() == ["test-model"]


def test_auth_error_names_the_variable_and_never_the_key(make_client, caplog):
    caplog.set_level(logging.DEBUG)
    with OpenAITestServer([reply("unused")], api_key="the-right-key") as server:
        client = make_client(base_url=server.base_url, api_key_env="MY_LLM_KEY")
        with pytest.raises(LlmError) as caught:
            client.chat(HELLO, purpose="lowering")
        # The server echoed the presented key in its error body, as OpenAI does.
        assert FAKE_KEY in server.requests[0].headers["authorization"]
    error = caught.value
    assert error.kind == "auth"
    assert "MY_LLM_KEY" in error.message and "llmApiKeyEnv" in error.message
    for text in (str(error), repr(error), error.message, caplog.text, repr(client)):
        assert FAKE_KEY not in text
        assert FAKE_KEY[-8:] not in text


def test_key_is_never_logged_across_retries(openai_server, client, caplog):
    caplog.set_level(logging.DEBUG)
    openai_server.push(server_error(500), reply("ok"))
    client.chat(HELLO, purpose="lowering")
    assert "retry 1 of 2" in caplog.text  # the retry itself is logged...
    assert FAKE_KEY not in caplog.text  # ...but no key, at any level, from any logger
    assert FAKE_KEY not in repr(client) and FAKE_KEY not in repr(client.config)


def test_key_read_from_the_named_environment_variable(openai_server, monkeypatch):
    monkeypatch.setenv("KB_TEST_LLM_KEY", FAKE_KEY)
    config = LlmConfig(
        base_url=openai_server.base_url, model="test-model", api_key_env="KB_TEST_LLM_KEY"
    )
    openai_server.push(reply("ok"))
    LlmClient(config).chat(HELLO, purpose="lowering")
    assert openai_server.chat_requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"


def test_local_endpoint_without_key_uses_placeholder(openai_server, monkeypatch):
    monkeypatch.delenv("KB_TEST_LLM_KEY", raising=False)
    config = LlmConfig(
        base_url=openai_server.base_url, model="test-model", api_key_env="KB_TEST_LLM_KEY"
    )
    openai_server.push(reply("ok"))
    assert LlmClient(config).chat(HELLO, purpose="lowering").text == "ok"
    header = openai_server.chat_requests[0].headers["authorization"]
    assert header == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


def test_openai_without_key_is_not_configured(monkeypatch):
    monkeypatch.delenv("KB_TEST_LLM_KEY", raising=False)
    for base_url in (None, "https://api.openai.com/v1"):
        with pytest.raises(LlmError) as caught:
            LlmClient(LlmConfig(base_url=base_url, api_key_env="KB_TEST_LLM_KEY"))
        assert caught.value.kind == "not_configured"
        assert "llmBaseUrl" in caught.value.message and "KB_TEST_LLM_KEY" in caught.value.message


def test_config_from_settings():
    settings = Settings(
        llm_base_url="http://localhost:8000/v1",
        llm_model="qwen",
        llm_api_key_env="VLLM_KEY",
        llm_timeout_s=7.5,
        llm_max_retries=1,
    )
    config = LlmConfig.from_settings(settings)
    assert (config.base_url, config.model, config.api_key_env) == (
        "http://localhost:8000/v1",
        "qwen",
        "VLLM_KEY",
    )
    assert (config.timeout_s, config.max_retries) == (7.5, 1)
