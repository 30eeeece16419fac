"""State extractor: refine the rule-based performance state with an LLM.

The rules in harness/analysis/classify.py give a deterministic state; the LLM sees the same findings
(compact, never raw metric dumps) and the KB's known state ids, and either confirms or picks a known
state, or proposes a new one. Any change from the rule-based state is kept only at or above
`min_confidence`, and a new id must be well formed; otherwise the rule-based state stands.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from kernelblaster.agents.llm.client import LlmClient, Usage
from kernelblaster.agents.llm.prompting import describe_state, render_messages
from kernelblaster.agents.llm.reply_json import ask_json
from kernelblaster.harness.protocol.records import PerfState

# `<bottleneck>.<aspect>[.<detail>]`, the shape of the catalog's ids ("latency.long_scoreboard").
NEW_STATE_ID = re.compile(r"^(memory|compute|latency|occupancy|launch)(\.[a-z0-9_]+){1,2}$")
MAX_STATE_ID = 64


class StateChoice(msgspec.Struct, kw_only=True, frozen=True):
    state: str  # the state to use from now on
    source: Literal["rules", "known", "new"]  # rules: the LLM's suggestion was not taken
    confidence: float  # the LLM's, for its suggestion (even when not taken)
    rationale: str
    usage: Usage


class _StateReply(msgspec.Struct):
    state: str
    confidence: float
    rationale: str = ""


def refine_state(
    client: LlmClient,
    state: PerfState,
    known_states: list[str],
    *,
    min_confidence: float = 0.7,
) -> StateChoice:
    messages = render_messages(
        "state_extractor",
        known_states=", ".join(known_states) or "(none yet)",
        kernel=state.kernel,
        arch=state.arch,
        state=describe_state(state),
    )
    answer = ask_json(client, messages, _StateReply, purpose="state_extractor", max_tokens=300)
    proposal = answer.value
    if proposal is None:
        return _keep(state, 0.0, f"state extractor reply unparseable: {answer.error}", answer.usage)
    proposed = proposal.state.strip()
    confidence = min(max(proposal.confidence, 0.0), 1.0)
    rationale = proposal.rationale.strip()[:300]
    if proposed == state.state:
        return _keep(state, confidence, rationale, answer.usage)
    if confidence < min_confidence:
        return _keep(
            state, confidence,
            f"kept the rule-based state: {proposed!r} proposed at confidence {confidence:.2f}, "
            f"below {min_confidence:.2f}",
            answer.usage,
        )  # fmt: skip
    if proposed in known_states:
        return StateChoice(
            state=proposed, source="known", confidence=confidence, rationale=rationale,
            usage=answer.usage,
        )  # fmt: skip
    if len(proposed) > MAX_STATE_ID or not NEW_STATE_ID.match(proposed):
        return _keep(
            state, confidence,
            f"kept the rule-based state: proposed id {proposed[:80]!r} is not of the form "
            "<bottleneck>.<aspect>",
            answer.usage,
        )  # fmt: skip
    return StateChoice(
        state=proposed, source="new", confidence=confidence, rationale=rationale, usage=answer.usage
    )


def _keep(state: PerfState, confidence: float, rationale: str, usage: Usage) -> StateChoice:
    return StateChoice(
        state=state.state, source="rules", confidence=confidence, rationale=rationale, usage=usage
    )
