"""The LLM client: one OpenAI-compatible chat endpoint. The `openai` package does the HTTP; retries
are ours, so they are bounded, honour Retry-After and are counted. Every failure is an `LlmError`
saying what went wrong and how to fix it. The API key lives only inside the `openai` client:
never logged, never in a repr, scrubbed from any server text we repeat."""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import time
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import httpx2
import msgspec
import openai

if TYPE_CHECKING:
    from kernelblaster.settings import Settings

log = logging.getLogger(__name__)

ErrorKind = Literal[
    "unreachable", "auth", "model_not_found", "rate_limited", "timeout", "bad_response",
    "not_configured",
]  # fmt: skip

# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the openai client insists on one.
LOCAL_PLACEHOLDER_KEY = "kernelblaster-no-key"
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
# Worth another try: request timeout, conflict (a server busy loading), rate limit; also 5xx.
RETRY_STATUSES = frozenset({408, 409, 429})
CHARS_PER_TOKEN = 4  # the usual rough estimate for English text and code


class LlmConfig(msgspec.Struct, kw_only=True, frozen=True):
    base_url: str | None = None  # None: the official OpenAI endpoint
    model: str = "gpt-4o"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    max_retries: int = 3  # extra attempts after the first, for 429, 5xx and timeouts
    backoff_base_s: float = 1.0  # first backoff; doubles per retry, with jitter
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0  # a longer Retry-After is not worth waiting for

    @classmethod
    def from_settings(cls, settings: Settings) -> LlmConfig:
        return cls(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key_env=settings.llm_api_key_env,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )

    @property
    def url(self) -> str:
        return (self.base_url or OPENAI_DEFAULT_URL).rstrip("/")


class Usage(msgspec.Struct, kw_only=True, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # the endpoint sent no usage; counted as characters / 4

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            estimated=self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LlmReply(msgspec.Struct, kw_only=True, frozen=True):
    text: str
    usage: Usage
    finish_reason: str | None
    model: str


class LlmError(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class _Retryable(Exception):
    """An attempt failed in a way worth retrying; carries the error to raise if none is left."""

    def __init__(self, error: LlmError, retry_after_s: float | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after_s = retry_after_s


def is_local_url(url: str | None) -> bool:
    host = urlsplit(url).hostname if url else None
    return host is not None and (host in _LOCAL_HOSTS or host.endswith(".localhost"))


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class LlmClient:
    def __init__(self, config: LlmConfig, *, api_key: str | None = None) -> None:
        self.config = config
        self.usage_log: list[tuple[str, Usage]] = []
        key = api_key or os.environ.get(config.api_key_env) or None
        if key is None:
            if config.base_url is None or urlsplit(config.url).hostname == "api.openai.com":
                raise LlmError(
                    "not_configured",
                    "no LLM endpoint configured: set llmBaseUrl to an OpenAI-compatible server "
                    f"(vLLM, Ollama, llama.cpp), or set the environment variable "
                    f"{config.api_key_env} (named by llmApiKeyEnv) to use {config.url}",
                )
            # Self-hosted servers usually run without auth; if this one wants a key, its 401
            # becomes an "auth" error that names the variable to set.
            key = LOCAL_PLACEHOLDER_KEY
        self._secrets = [key] if key != LOCAL_PLACEHOLDER_KEY else []
        self._openai = openai.OpenAI(
            base_url=config.url, api_key=key, timeout=config.timeout_s, max_retries=0
        )

    def __repr__(self) -> str:
        return f"LlmClient(url={self.config.url!r}, model={self.config.model!r})"

    def usage_by_purpose(self) -> dict[str, Usage]:
        totals: dict[str, Usage] = {}
        for purpose, usage in self.usage_log:
            totals[purpose] = totals.get(purpose, Usage()) + usage
        return totals

    def list_models(self) -> list[str]:
        """Model ids the endpoint serves (GET /models)."""
        try:
            return [m.id for m in self._openai.models.list()]
        except openai.OpenAIError as exc:
            raise self._map_error(exc) from None

    def chat(
        self,
        messages: list[dict],
        *,
        purpose: str,
        temperature: float = 0.2,
        max_tokens: int | None = None,
    ) -> LlmReply:
        attempts = 1 + max(0, self.config.max_retries)
        for attempt in range(attempts):
            try:
                reply = self._chat_once(messages, temperature, max_tokens)
            except _Retryable as failure:
                if attempt + 1 == attempts:
                    error = failure.error
                    raise LlmError(
                        error.kind, f"{error.message} (gave up after {attempts} attempts)"
                    ) from None
                wait = self._backoff(attempt, failure.retry_after_s)
                log.warning(
                    "LLM call for %s failed (%s); retry %d of %d in %.2f s",
                    purpose, failure.error.kind, attempt + 1, attempts - 1, wait,
                )  # fmt: skip
                time.sleep(wait)
                continue
            self.usage_log.append((purpose, reply.usage))
            log.debug(
                "LLM call for %s: %d prompt + %d completion tokens%s",
                purpose, reply.usage.prompt_tokens, reply.usage.completion_tokens,
                " (estimated)" if reply.usage.estimated else "",
            )  # fmt: skip
            return reply
        raise AssertionError("unreachable: the loop returns or raises")

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.config.retry_after_max_s)
        ceiling = min(self.config.backoff_base_s * 2**attempt, self.config.backoff_max_s)
        return ceiling * random.uniform(0.5, 1.0)  # jitter, so parallel clients spread out

    def _chat_once(
        self, messages: list[dict], temperature: float, max_tokens: int | None
    ) -> LlmReply:
        try:
            completion = self._openai.chat.completions.create(
                model=self.config.model,
                # Plain {"role", "content"} dicts, the wire format: openai types them as its
                # message TypedDicts, which a list[dict] built by the prompts isn't.
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                max_tokens=openai.omit if max_tokens is None else max_tokens,  # omit: not sent
            )
        except openai.APIStatusError as exc:
            if exc.status_code in RETRY_STATUSES or exc.status_code >= 500:
                raise _Retryable(self._map_error(exc), _retry_after(exc.response)) from None
            raise self._map_error(exc) from None
        except openai.APITimeoutError as exc:
            raise _Retryable(self._map_error(exc), None) from None
        except openai.APIConnectionError as exc:
            # A refused connection is a definite answer; a dropped one may be transient.
            if isinstance(exc.__cause__, httpx2.ConnectError):
                raise self._map_error(exc) from None
            raise _Retryable(self._map_error(exc), None) from None
        except openai.OpenAIError as exc:
            raise self._map_error(exc) from None
        except json.JSONDecodeError:
            raise LlmError(
                "bad_response",
                f"{self.config.url}/chat/completions answered with a body that is not JSON; "
                "is llmBaseUrl an OpenAI-compatible chat-completions endpoint?",
            ) from None
        return self._parse(completion, messages)

    def _parse(self, completion: object, messages: list[dict]) -> LlmReply:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise LlmError(
                "bad_response",
                f"{self.config.url}/chat/completions answered without any choices; "
                "is llmBaseUrl an OpenAI-compatible chat-completions endpoint?",
            )
        choice = choices[0]
        content = getattr(getattr(choice, "message", None), "content", None)
        text = content if isinstance(content, str) else ""
        usage = getattr(completion, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        if isinstance(prompt_tokens, int) and isinstance(completion_tokens, int):
            counted = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        else:
            prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
            counted = Usage(
                prompt_tokens=math.ceil(prompt_chars / CHARS_PER_TOKEN),
                completion_tokens=estimate_tokens(text),
                estimated=True,
            )
        model = getattr(completion, "model", None)
        return LlmReply(
            text=text,
            usage=counted,
            finish_reason=getattr(choice, "finish_reason", None),
            model=model if isinstance(model, str) else self.config.model,
        )

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
            # Servers often echo a key's tail ("sk-...abcd"); drop any run of its last chars.
            if len(secret) >= 8:
                text = text.replace(secret[-8:], "[redacted]")
        return text

    def _server_message(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        if isinstance(body, dict):
            body = body.get("error", body)
        message = body.get("message") if isinstance(body, dict) else None
        return self._scrub(str(message or exc.message))[:300]

    def _map_error(self, exc: openai.OpenAIError) -> LlmError:
        url, model, key_env = self.config.url, self.config.model, self.config.api_key_env
        if isinstance(exc, openai.APITimeoutError):
            return LlmError(
                "timeout",
                f"{url} did not answer within {self.config.timeout_s:g} s; raise llmTimeoutS "
                "or use a faster model/server",
            )
        if isinstance(exc, openai.APIConnectionError):
            return LlmError(
                "unreachable", f"cannot reach {url}: is the server running? set llmBaseUrl"
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            # The server's own text may quote the key, so it is not repeated here.
            return LlmError(
                "auth",
                f"{url} rejected the API key (HTTP {exc.status_code}); set the environment "
                f"variable named by llmApiKeyEnv ({key_env}) to a valid key",
            )
        if isinstance(exc, openai.NotFoundError):
            detail = self._server_message(exc)
            if "model" in detail.lower() or exc.code == "model_not_found":
                return LlmError(
                    "model_not_found",
                    f"model {model!r} not found at {url}; set llmModel to one the server "
                    f"serves{self._served_models_hint()}",
                )
            return LlmError(
                "unreachable",
                f"{url}/chat/completions does not exist (HTTP 404: {detail}); set llmBaseUrl "
                "to the API root, which usually ends in /v1",
            )
        if isinstance(exc, openai.RateLimitError):
            return LlmError(
                "rate_limited",
                f"{url} is rate limiting requests (HTTP 429: {self._server_message(exc)}); "
                "wait, or raise llmMaxRetries",
            )
        if isinstance(exc, openai.APIStatusError):
            return LlmError(
                "bad_response",
                f"{url} answered HTTP {exc.status_code}: {self._server_message(exc)}",
            )
        return LlmError("bad_response", f"{url} sent a reply that is not a chat completion")

    def _served_models_hint(self) -> str:
        try:
            served = [m.id for m in self._openai.models.list()]
        except openai.OpenAIError:
            return ""  # the listing is only a hint; the error above already says what to fix
        return f" (it lists: {', '.join(served[:10])})" if served else ""


def _retry_after(response: httpx2.Response) -> float | None:
    """Seconds to wait from `retry-after-ms` (OpenAI) or `Retry-After` (seconds or HTTP date);
    None when neither header is present or readable."""
    millis = _to_float(response.headers.get("retry-after-ms"))
    if millis is not None:
        return max(0.0, millis / 1000)
    value = response.headers.get("retry-after")
    if value is None:
        return None
    seconds = _to_float(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _to_float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
