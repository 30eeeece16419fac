"""Soft verification: an LLM review that a candidate still computes what the reference does, after
the numeric and static checks, for what they can miss (shapes the tests didn't cover, results
cached across calls, forbidden call-outs). A reply that is not the asked-for JSON, twice, is a
rejection: an unverified candidate must never be offered."""

from __future__ import annotations

import msgspec

from kernelblaster.agents.llm.client import LlmClient, Usage
from kernelblaster.agents.llm.prompting import bullets, render_messages
from kernelblaster.agents.llm.reply_json import ask_json

UNPARSEABLE = "verifier reply unparseable"


class SoftVerdict(msgspec.Struct, kw_only=True, frozen=True):
    ok: bool
    reasons: list[str]  # why it was flagged (may also carry remarks when ok)
    usage: Usage


class _VerdictReply(msgspec.Struct):
    ok: bool
    reasons: list[str] = []


def soft_verify(
    client: LlmClient,
    *,
    reference_source: str,
    original_source: str,
    candidate_source: str,
    constraints: list[str],
) -> SoftVerdict:
    messages = render_messages(
        "soft_verify",
        constraints=bullets(constraints),
        reference_source=reference_source.rstrip("\n"),
        original_source=original_source.rstrip("\n"),
        candidate_source=candidate_source.rstrip("\n"),
    )
    answer = ask_json(client, messages, _VerdictReply, purpose="soft_verify", max_tokens=800)
    if answer.value is None:
        return SoftVerdict(ok=False, reasons=[f"{UNPARSEABLE}: {answer.error}"], usage=answer.usage)
    reasons = [r.strip() for r in answer.value.reasons if r.strip()]
    if not answer.value.ok and not reasons:
        reasons = ["the verifier flagged the candidate without giving a reason"]
    return SoftVerdict(ok=answer.value.ok, reasons=reasons, usage=answer.usage)
