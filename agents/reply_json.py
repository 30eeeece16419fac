"""Asking an LLM for a JSON object and decoding it defensively into a typed record.

Models wrap JSON in code fences, prefix it with prose, or get a field wrong. The object is taken
from a ```json block or the outermost braces, decoded and validated by msgspec against the
caller's schema; on failure the model is asked once more with the exact error, and after that
the caller gets `value=None` and the reason, never a half-valid record.
"""

from __future__ import annotations

from typing import Generic, NamedTuple, TypeVar

import msgspec

from kernelblaster.agents.code_extract import fenced_blocks
from kernelblaster.agents.llm import LlmClient, Usage
from kernelblaster.agents.prompting import render_messages

T = TypeVar("T")


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
