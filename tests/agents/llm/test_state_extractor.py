"""State extractor: confirm, switch to a known state, or propose a new one, gated by confidence."""

from __future__ import annotations

import json

import pytest

from bench.openai_server import reply
from kernelblaster.agents.llm.state_extractor import refine_state
from kernelblaster.harness.protocol.records import Finding, Headroom, PerfState

KNOWN = ["memory.dram", "memory.l1", "latency.long_scoreboard", "occupancy.registers"]
STATE = PerfState(
    kernel="row_sum",
    arch="sm_90",
    bottleneck="memory",
    state="memory.dram",
    summary="memory-bound: DRAM 41% of peak with long scoreboard stalls dominating",
    findings=[
        Finding(
            id="long_scoreboard_stalls",
            evidence={"stall_long_sb_pct": 71.0},
            estimated_speedup=35.0,
            message="warps wait on global loads",
        )
    ],
    headroom=Headroom(roof="dram_bandwidth", achieved_fraction=0.41),
    metrics={"smsp__pcsamp_warps_issue_stalled_long_scoreboard": 7123.0},
)


def answer(state: str, confidence: float, rationale: str = "because") -> str:
    return json.dumps({"state": state, "confidence": confidence, "rationale": rationale})


def test_prompt_is_compact_findings_not_metrics(openai_server, client):
    openai_server.push(reply(answer("memory.dram", 0.9)))
    refine_state(client, STATE, KNOWN)
    (request,) = openai_server.chat_requests
    prompt = request.prompt_text
    assert "Known states: memory.dram, memory.l1, latency.long_scoreboard" in prompt
    assert "long_scoreboard_stalls" in prompt and "stall_long_sb_pct=71" in prompt
    assert "smsp__pcsamp" not in prompt  # the raw metrics dump stays out
    assert len(prompt) < 1500
    assert client.usage_log[0][0] == "state_extractor"


def test_confirming_the_rule_state(openai_server, client):
    openai_server.push(reply(answer("memory.dram", 0.8, "DRAM traffic dominates")))
    choice = refine_state(client, STATE, KNOWN)
    assert (choice.state, choice.source, choice.confidence) == ("memory.dram", "rules", 0.8)
    assert choice.rationale == "DRAM traffic dominates"


def test_switching_to_a_known_state(openai_server, client):
    openai_server.push(reply(answer("latency.long_scoreboard", 0.85)))
    choice = refine_state(client, STATE, KNOWN)
    assert (choice.state, choice.source) == ("latency.long_scoreboard", "known")
    assert choice.usage.prompt_tokens == 100


@pytest.mark.parametrize("proposed", ["latency.long_scoreboard", "latency.dependent_loads"])
def test_low_confidence_keeps_the_rule_state(openai_server, client, proposed):
    openai_server.push(reply(answer(proposed, 0.55)))
    choice = refine_state(client, STATE, KNOWN, min_confidence=0.7)
    assert (choice.state, choice.source) == ("memory.dram", "rules")
    assert "confidence 0.55, below 0.70" in choice.rationale


def test_new_state_kept_at_high_confidence(openai_server, client):
    openai_server.push(reply(answer("latency.dependent_loads", 0.9, "pointer chasing")))
    choice = refine_state(client, STATE, KNOWN)
    assert (choice.state, choice.source) == ("latency.dependent_loads", "new")


def test_malformed_new_state_is_refused(openai_server, client):
    openai_server.push(reply(answer("Memory Bound (really!)", 0.95)))
    choice = refine_state(client, STATE, KNOWN)
    assert (choice.state, choice.source) == ("memory.dram", "rules")
    assert "not of the form" in choice.rationale


def test_unparseable_replies_keep_the_rule_state(openai_server, client):
    openai_server.push(reply("It is memory bound."), reply('{"state": "memory.l1"}'))
    choice = refine_state(client, STATE, KNOWN)
    assert (choice.state, choice.source, choice.confidence) == ("memory.dram", "rules", 0.0)
    assert choice.rationale.startswith("state extractor reply unparseable")
    assert "confidence" in choice.rationale  # the missing field is named
    assert len(openai_server.chat_requests) == 2
