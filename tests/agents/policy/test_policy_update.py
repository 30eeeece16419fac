"""Policy update against the real SQLite KB: numeric evaluation, then LLM proposals validated
one by one before anything is written."""

from __future__ import annotations

import json
import math
import uuid

import pytest

from bench.openai_server import reply
from kernelblaster.agents.policy.update import evaluate_policy, update_policy
from kernelblaster.kb.records import Attempt

ARCH = "sm_90"
COALESCE = ("memory.dram", "coalesce_global_access")
VECTOR = ("latency.long_scoreboard", "vectorized_loads")


def attempt(
    key: tuple[str, str],
    outcome: str,
    predicted: float,
    measured: float | None = None,
    *,
    kernel: str = "softmax",
    arch: str = ARCH,
    target_finding: str | None = None,
) -> Attempt:
    return Attempt(
        id=uuid.uuid4().hex,
        time=1.0,
        arch=arch,
        kernel=kernel,
        source_hash="s",
        candidate_hash="c",
        before_state=key[0],
        technique=key[1],
        predicted_speedup=predicted,
        measured_speedup=measured,
        outcome=outcome,
        prompt_tokens=1000,
        completion_tokens=500,
        target_finding=target_finding,
    )


@pytest.fixture
def batch(kb) -> list[Attempt]:
    attempts = [
        attempt(COALESCE, "success", 2.0, 1.5),
        attempt(COALESCE, "success", 2.0, 1.2, kernel="row_sum"),
        attempt(COALESCE, "compile_error", 2.0),
        attempt(VECTOR, "regression", 1.3, 0.9),
        attempt(COALESCE, "success", 2.0, 3.0, arch="sm_80"),  # another GPU: not this batch
    ]
    for a in attempts:
        kb.record(a)
    return attempts


def test_evaluation_is_exact_arithmetic(kb, batch):
    evaluation = evaluate_policy(kb, arch=ARCH, attempts=batch)
    assert [(g.state, g.technique) for g in evaluation] == [COALESCE, VECTOR]
    coalesce, vector = evaluation
    assert coalesce.attempts == 3
    assert coalesce.outcomes == {"success": 2, "compile_error": 1}
    assert coalesce.predicted_speedup == pytest.approx(2.0)
    assert coalesce.measured_speedup == pytest.approx(math.sqrt(1.5 * 1.2))
    assert coalesce.log_gap == pytest.approx((math.log(0.75) + math.log(0.6)) / 2)
    assert coalesce.kernels == ["row_sum", "softmax"]
    assert coalesce.kb_predicted_speedup == kb.entry(ARCH, *COALESCE).predicted_speedup
    assert vector.measured_speedup == pytest.approx(0.9)
    assert vector.log_gap == pytest.approx(math.log(0.9 / 1.3))


def test_a_group_aimed_at_different_findings_shows_what_each_kind_of_kernel_measured(
    openai_server, client, kb
):
    """Coalescing paid 19x and 22x on kernels with uncoalesced accesses and nothing on one
    without: the prompts show it per finding, so a note can say which kernels it pays on
    instead of a prior for the whole state being drawn from the uncoalesced ones."""
    state = ("launch.small_grid", "coalesce_global_access")
    batch = [
        attempt(state, "success", 2.75, 19.3, target_finding="uncoalesced_global_access"),
        attempt(state, "success", 2.75, 22.4, target_finding="uncoalesced_global_access"),
        attempt(state, "regression", 8.0, 0.95, kernel="col_sum", target_finding="small_grid"),
        attempt(state, "compile_error", 2.0, target_finding="small_grid"),
    ]
    for a in batch:
        kb.record(a)
    (group,) = evaluate_policy(kb, arch=ARCH, attempts=batch)
    assert group.measured_by_finding == pytest.approx(
        {"small_grid": 0.95, "uncoalesced_global_access": math.sqrt(19.3 * 22.4)}
    )
    openai_server.push(reply('{"analyses": []}'), reply(proposals()))
    update_policy(client, kb, arch=ARCH, attempts=batch)
    gap_request, _ = openai_server.chat_requests
    assert (
        "by the finding it was aimed at: on kernels with small_grid 0.95x, on kernels with "
        "uncoalesced_global_access 20.79x"
    ) in gap_request.prompt_text


def proposals(*updates: dict) -> str:
    return "```json\n" + json.dumps({"updates": list(updates)}) + "\n```"


GAP_REPLY = json.dumps(
    {
        "analyses": [
            {
                "state": COALESCE[0],
                "technique": COALESCE[1],
                "explanation": "Rows of 4096 floats were already L2-resident; one build broke.",
            },
            {"state": "memory.l1", "technique": "nothing", "explanation": "not in the batch"},
        ]
    }
)


def test_valid_proposals_are_written_and_invalid_ones_dropped(openai_server, client, kb, batch):
    good_note = "Gains shrink when rows fit in L2; check DRAM share first."
    openai_server.push(
        reply(GAP_REPLY, usage=(700, 80)),
        reply(
            proposals(
                {
                    "state": COALESCE[0],
                    "technique": COALESCE[1],
                    "note": f"  {good_note}  ",
                    "prior_speedup": 1.4,
                    "reason": "measured 1.34x over 2 kernels",
                },
                {"state": VECTOR[0], "technique": VECTOR[1], "note": "Regressed: 0.9x."},
                {"state": "memory.l1", "technique": "shared_memory_tiling", "note": "x"},
                {
                    "state": VECTOR[0],
                    "technique": VECTOR[1],
                    "prior_speedup": 25.0,
                    "reason": "optimism",
                },
                {"state": COALESCE[0], "technique": COALESCE[1], "note": "y" * 301},
                {"state": VECTOR[0], "technique": VECTOR[1], "note": "a second note"},
                {"state": COALESCE[0], "technique": COALESCE[1]},
                {"state": VECTOR[0], "technique": VECTOR[1], "prior_speedup": 1.1},
                {"state": VECTOR[0], "technique": VECTOR[1], "note": "z", "weight": 3},
            ),
            usage=(900, 300),
        ),
    )
    result = update_policy(client, kb, arch=ARCH, attempts=batch)

    assert result.error is None
    assert [(a.state, a.technique) for a in result.analyses] == [COALESCE]
    assert [(u.state, u.technique) for u in result.applied] == [COALESCE, VECTOR]
    assert result.applied[0].note == good_note  # stripped
    reasons = [r.reason for r in result.rejected]
    assert reasons[0] == "memory.l1 / shared_memory_tiling is not an entry of this batch"
    assert "Expected `float` <= 10.0" in reasons[1]
    assert "Expected `str` of length <= 300" in reasons[2]
    assert reasons[3:6] == [
        "a second update for the same entry",
        "proposes neither a note nor a prior",
        "a prior change needs a reason",
    ]
    assert "unknown field `weight`" in reasons[6]
    assert len(reasons) == 7
    assert result.usage.prompt_tokens == 1600 and result.usage.completion_tokens == 380

    coalesce = kb.entry(ARCH, *COALESCE)
    assert coalesce.notes == [good_note]
    assert (coalesce.prior_speedup, coalesce.prior_source) == (1.4, "measured 1.34x over 2 kernels")
    vector = kb.entry(ARCH, *VECTOR)
    assert vector.notes == ["Regressed: 0.9x."]
    assert vector.prior_speedup is None  # the 25x and the reasonless 1.1x never reached the KB
    assert kb.entry(ARCH, "memory.l1", "shared_memory_tiling") is None
    assert kb.entry("sm_80", *COALESCE).notes == []

    gap_request, update_request = openai_server.chat_requests
    assert (
        "- memory.dram / coalesce_global_access: 3 attempts (1 compile_error, 2 success); "
        "predicted 2.00x, measured 1.34x (gap 0.67x)"
    ) in gap_request.prompt_text
    assert "sm_80" not in gap_request.prompt_text
    assert "by the finding" not in gap_request.prompt_text  # one kind of kernel: nothing to split
    assert "already L2-resident" in update_request.prompt_text
    assert "not in the batch" not in update_request.prompt_text
    assert [p for p, _ in client.usage_log] == ["perf_gap", "parameter_update"]


def test_unusable_gap_analysis_writes_nothing(openai_server, client, kb, batch):
    openai_server.push(reply("The policy is fine."), reply('{"analyses": "none"}'))
    result = update_policy(client, kb, arch=ARCH, attempts=batch)
    assert result.error is not None and result.error.startswith("gap analysis unusable")
    assert result.applied == [] and len(result.evaluation) == 2
    assert len(openai_server.chat_requests) == 2  # one retry, and no parameter_update call
    assert kb.entry(ARCH, *COALESCE).notes == []


def test_unusable_parameter_update_writes_nothing(openai_server, client, kb, batch):
    openai_server.push(reply(GAP_REPLY), reply("Lower the prior."), reply("Lower it a lot."))
    result = update_policy(client, kb, arch=ARCH, attempts=batch)
    assert result.error is not None and result.error.startswith("parameter update unusable")
    assert len(result.analyses) == 1 and result.applied == []
    assert kb.priors() == []


def test_no_attempts_for_this_arch_makes_no_call(openai_server, client, kb, batch):
    result = update_policy(client, kb, arch="sm_100", attempts=batch)
    assert result.evaluation == [] and result.error is None
    assert openai_server.requests == []
