"""Asking an LLM for a JSON object and decoding it defensively into a typed record: taken from a
```json block or the outermost braces, validated by msgspec; on failure the model is asked once
more with the exact error, then the caller gets `value=None` and the reason. `validate_items`
checks each proposed item on its own (schema, the caller's checks, no secrets or code), so one
bad item is dropped and the rest count."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

import msgspec

from kernelblaster.agents.llm.client import LlmClient, Usage
from kernelblaster.agents.llm.code_extract import fenced_blocks
from kernelblaster.agents.llm.prompting import render_messages

T = TypeVar("T")

REJECTED_ITEM_CHARS = 300  # of a rejected item's JSON kept beside its reason

# Credentials a model might echo from its context or invent: OpenAI-style keys, GitHub and
# Slack tokens, AWS access keys, private key blocks, bearer tokens, and `key = value` pairs.
_SECRET = re.compile(
    r"""sk-[A-Za-z0-9_-]{16,}
    | (?:ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{20,}
    | xox[abprs]-[A-Za-z0-9-]{10,}
    | AKIA[0-9A-Z]{16}
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----
    | \bBearer\s+[A-Za-z0-9._~+/-]{16,}
    | \b(?:api[_-]?key|secret|token|password|passwd)\b\s*[:=]\s*\S{6,}""",
    re.IGNORECASE | re.VERBOSE,
)
# An opaque token: 32+ characters with upper case, lower case and digits (no prose word is).
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
# Code, where prose belongs: a fence, a preprocessor line, a kernel or device function
# definition, a launch, or a braced block of statements.
_CODE = re.compile(
    r"""```
    | ^[ \t]*\#[ \t]*(?:include|define|pragma)\b
    | \b__(?:global|device)__\s+[\w\s*&<>:]*\w\s*\(
    | <<<[^<>]*>>>
    | \{[^{}]*;[^{}]*\}""",
    re.MULTILINE | re.VERBOSE,
)
_STATEMENT_LINE = re.compile(r";[ \t]*$", re.MULTILINE)


class JsonReplyError(ValueError):
    pass


class JsonAnswer(NamedTuple, Generic[T]):
    value: T | None  # None when no valid object came back
    usage: Usage
    error: str | None  # why the last reply was rejected, when value is None


def decode_json_reply(reply: str, schema: type[T]) -> T:
    """The JSON object in `reply`, validated against `schema`."""
    candidates = [b.text for b in fenced_blocks(reply) if b.language in ("json", "")]
    start, end = reply.find("{"), reply.rfind("}")
    if start != -1 and end > start:
        candidates.append(reply[start : end + 1])
    if not candidates:
        raise JsonReplyError("the reply contains no JSON object")
    errors = []
    for text in candidates:
        try:
            return msgspec.json.decode(text.strip(), type=schema)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            errors.append(str(exc))
    raise JsonReplyError(errors[-1][:300])


def ask_json(
    client: LlmClient,
    messages: list[dict[str, str]],
    schema: type[T],
    *,
    purpose: str,
    retries: int = 1,
    max_tokens: int | None = None,
) -> JsonAnswer[T]:
    conversation = list(messages)
    usage = Usage()
    error = ""
    for attempt in range(1 + retries):
        reply = client.chat(conversation, purpose=purpose, temperature=0.0, max_tokens=max_tokens)
        usage = usage + reply.usage
        try:
            return JsonAnswer(decode_json_reply(reply.text, schema), usage, None)
        except JsonReplyError as exc:
            error = str(exc)
        if attempt < retries:
            conversation = [
                *messages,
                {"role": "assistant", "content": reply.text},
                *render_messages("json_retry", error=error),
            ]
    return JsonAnswer(None, usage, error)


class RejectedItem(msgspec.Struct, kw_only=True, frozen=True):
    index: int  # its position in the reply's list
    item: str  # the item's JSON, truncated to REJECTED_ITEM_CHARS
    reason: str


def text_problem(**texts: str) -> str | None:
    """Why free text from a model can't be kept (a secret or code in a named field), or None."""
    for name, text in texts.items():
        if _SECRET.search(text) or any(
            any(c.isupper() for c in token)
            and any(c.islower() for c in token)
            and any(c.isdigit() for c in token)
            for token in _OPAQUE.findall(text)
        ):
            return f"{name} looks like it holds a secret (a key or token); it is never stored"
        if _CODE.search(text) or len(_STATEMENT_LINE.findall(text)) >= 2:
            return f"{name} holds code; describe the change in words (the rewrite holds the code)"
    return None


def validate_items(
    raw_items: Sequence[msgspec.Raw],
    schema: type[T],
    problem: Callable[[T, list[T]], str | None],
    *,
    normalize: Callable[[T], T] = lambda item: item,
) -> tuple[list[T], list[RejectedItem]]:
    """Each raw item decoded against `schema`, `normalize`d (e.g. stripped) and checked by
    `problem(item, accepted so far)` (None: fine): the accepted items in order, and the
    rejected ones with their reasons."""
    accepted: list[T] = []
    rejected: list[RejectedItem] = []
    for index, raw in enumerate(raw_items):
        try:
            item = msgspec.json.decode(raw, type=schema)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            reason: str | None = f"invalid: {exc}"
        else:
            item = normalize(item)
            reason = problem(item, accepted)
        if reason is None:
            accepted.append(item)
        else:
            text = bytes(raw).decode(errors="replace")[:REJECTED_ITEM_CHARS]
            rejected.append(RejectedItem(index=index, item=text, reason=reason))
    return accepted, rejected
