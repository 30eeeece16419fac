"""The open action space against the scripted OpenAI-compatible server: where every technique the
KB ranks for a state was already tried on the kernel, the loop asks for new ones, validates
them (rejections kept with their reasons in the result), applies one in the next step, verifies,
records and ranks it by its outcome; one that keeps failing drops below the catalog and retires.
States come from real H200 ncu reports (tests/agents/loop/test_loop.py's RecordedHarness)."""

from __future__ import annotations

import json

import msgspec
import pytest

from bench.openai_server import reply, reply_by_agent
from kernelblaster.agents.llm.reply_json import text_problem
from kernelblaster.agents.loop.rollout_runners import runner_for
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.agents.policy.proposals import (
    DUPLICATE_SIMILARITY,
    description_similarity,
    why_propose,
)
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest, OptimizeResult
from kernelblaster.harness.protocol.records import Finding
from kernelblaster.kb.proposal_status import RETIRE_AFTER
from kernelblaster.kb.proposals import proposal_views
from kernelblaster.kb.records import Attempt, code_hash
from kernelblaster.settings import Settings
from tests.agents.loop.test_loop import SOFTMAX, RecordedHarness, cuda, soft

NEW_ID = "warp_per_row_online_softmax"
# The catalog's coalesce_global_access description, reworded as a model might repeat it.
REWORDED = (
    "Make the consecutive threads of a warp touch consecutive addresses, so that every "
    "32-byte sector fetched is fully used."
)


def run_loop(client, kb, harness, *, depth=1, proposals_limit=3) -> OptimizeResult:
    request = OptimizeRequest(
        source=str(SOFTMAX),
        source_text=SOFTMAX.read_text(),
        kernel="softmax_rowthread",
        rollouts=1,
        depth=depth,
        seed=7,
        proposals=proposals_limit,
    )
    return run_optimization(OptimizeRun(request=request, client=client, kb=kb, evaluate=harness))


def item(**overrides) -> dict:
    """A valid proposal for softmax_rowthread's state (memory.l1, uncoalesced loads)."""
    values = {
        "id": NEW_ID,
        "title": "One warp per row with an online max and sum",
        "description": "Give each row to one warp and compute the running maximum and the "
        "rescaled sum in a single pass, so each element is read once and the reads of a warp "
        "fall in consecutive addresses.",
        "how_to_apply": "Launch one warp per row; each lane strides over the row by the warp "
        "size keeping a running max and a sum rescaled when the max grows; combine lanes with "
        "warp shuffles, then write the normalized outputs in a second strided pass.",
        "addresses_findings": ["uncoalesced_global_access"],
        "prior_speedup": 3.0,
        "prior_reason": "one coalesced read pass instead of three strided ones per row",
    }
    values.update(overrides)
    return values


def proposals(*items: dict) -> str:
    return "Here are my proposals.\n```json\n" + json.dumps({"techniques": list(items)}) + "\n```"


def policy_replies():
    return reply(json.dumps({"analyses": []})), reply(json.dumps({"updates": []}))


def exhaust(kb, harness: RecordedHarness) -> list[str]:
    """Record a failed attempt of every technique the KB ranks for the original softmax's state
    on its very source, as earlier runs would have: the KB has nothing left to try there."""
    state = harness.original_state
    ranked = kb.rank(state.arch, state.state, state.findings)
    for n, ranked_technique in enumerate(ranked):
        kb.record(
            Attempt(
                id=f"earlier-{n}",
                time=1_700_000_000.0 + n,
                arch=state.arch,
                kernel="softmax_rowthread",
                source_hash=code_hash(SOFTMAX.read_text()),
                candidate_hash="",
                before_state=state.state,
                technique=ranked_technique.technique,
                predicted_speedup=ranked_technique.predicted_speedup,
                outcome="compile_error",
                target_finding=ranked_technique.target_finding,
            )
        )
    return [r.technique for r in ranked]


def test_a_state_with_nothing_left_gets_a_proposal_that_is_applied_verified_recorded_and_ranked(
    openai_server, client, kb
):
    harness = RecordedHarness()
    tried = exhaust(kb, harness)
    openai_server.push(
        reply(proposals(item())),
        reply(cuda("verified 0.5")),  # the next step applies it: 2x, verified
        reply(soft(True)),
        *policy_replies(),
    )
    outcome = run_loop(client, kb, harness, depth=1)

    assert outcome.error is None
    assert [(v.technique, v.accepted) for v in outcome.proposals] == [(NEW_ID, True)]
    (step,) = outcome.steps
    assert (step.technique, step.outcome) == (NEW_ID, "success")
    assert step.measured_speedup == pytest.approx(2.0)
    assert outcome.improved and outcome.techniques == [NEW_ID]
    # the proposal prompt said why, named what the KB has, and showed the kernel
    asked = openai_server.chat_requests[0].prompt_text
    assert f"all {len(tried)} techniques ranked for it were already tried" in asked
    assert "`coalesce_global_access`" in asked and "softmax_rowthread" in asked
    # the lowering agent was told the proposed technique's own how-to
    lowering = openai_server.chat_requests[1].prompt_text
    assert "each lane strides over the row by the warp size" in lowering
    # recorded in the KB with its provenance and outcome, and ranked by it
    (attempt,) = [a for a in kb.attempts() if a.technique == NEW_ID]
    assert (attempt.outcome, attempt.kernel) == ("success", "softmax_rowthread")
    (view,) = proposal_views(kb)
    assert (view.state, view.kernel, view.model, view.status, view.successes) == (
        harness.original_state.state,
        "softmax_rowthread",
        "test-model",
        "proposed",
        1,
    )
    state = harness.original_state
    mine = next(
        r for r in kb.rank(state.arch, state.state, state.findings) if r.technique == NEW_ID
    )
    assert (mine.proposal, mine.attempts, mine.successes) == ("proposed", 1, 1)
    assert mine.mean_speedup == pytest.approx(2.0)
    # the run's record of the proposals travels to the editor unchanged
    line = msgspec.json.encode(outcome)
    assert NEW_ID in json.loads(line)["proposals"][0]["technique"]


def test_rollouts_run_at_once_ask_for_proposals_once_and_share_them(openai_server, make_client, kb):
    """Three rollouts start together on a kernel the KB has nothing left for: the first asks,
    the others wait for its proposals to land in the KB and rank them instead of asking again
    (and racing it to validate against a KB without them)."""
    harness = RecordedHarness()
    exhaust(kb, harness)
    openai_server.responder = reply_by_agent(
        {
            "propose_techniques": reply(proposals(item()), delay_s=0.5),
            "lowering": reply(cuda("verified 0.5")),
            "soft_verify": reply(soft(True)),
            "perf_gap": reply(json.dumps({"analyses": []})),
            "parameter_update": reply(json.dumps({"updates": []})),
        }
    )
    request = OptimizeRequest(
        source=str(SOFTMAX),
        source_text=SOFTMAX.read_text(),
        kernel="softmax_rowthread",
        rollouts=3,
        depth=1,
        seed=7,
    )
    outcome = run_optimization(
        OptimizeRun(
            request=request,
            client=make_client(timeout_s=5.0),
            kb=kb,
            evaluate=harness,
            run_rollouts=runner_for(Settings()),
        )
    )

    assert outcome.error is None and len(outcome.steps) == 3
    asked = [r for r in openai_server.chat_requests if "were already tried" in r.prompt_text]
    assert len(asked) == 1
    assert [(v.technique, v.accepted) for v in outcome.proposals] == [(NEW_ID, True)]
    (view,) = proposal_views(kb)
    assert view.technique == NEW_ID


def test_malformed_oversized_duplicate_secret_and_code_proposals_are_rejected_with_reasons(
    openai_server, client, kb
):
    harness = RecordedHarness()
    exhaust(kb, harness)
    catalog = kb.technique("coalesce_global_access")
    reworded = REWORDED
    assert reworded != catalog.description
    assert description_similarity(reworded, catalog.description) >= DUPLICATE_SIMILARITY
    batch = [
        item(id="coalesce_global_access"),  # a catalog id
        item(
            id="coalesced_again",
            description=reworded,
            addresses_findings=list(catalog.addresses_findings),
        ),
        item(id="too_long", description="x " * 400),  # oversized
        item(id="no_prior", prior_speedup=None),  # malformed
        item(id="wild_claim", prior_speedup=50.0),  # out of bounds
        item(
            id="leaky",
            how_to_apply="Call the tuning service with api_key=sk-abcdefghijklmnop"
            "qrstuvwxyz0123 and apply what it returns to the kernel.",
        ),
        item(
            id="codey",
            how_to_apply="Replace the loop with: for (int i = lane; i < n; i += 32)"
            " { s += x[i]; } then reduce.",
        ),
        item(id="made_up", addresses_findings=["cosmic_rays"]),  # an unknown finding
        item(),  # the one good proposal
        item(title="The same id again"),  # a duplicate within the batch
    ]
    openai_server.push(
        reply(proposals(*batch)),
        reply(cuda("verified 0.8")),
        reply(soft(True)),
        *policy_replies(),
    )
    outcome = run_loop(client, kb, harness, depth=1)

    reasons = {v.technique: v.reason for v in outcome.proposals if not v.accepted}
    assert [v.technique for v in outcome.proposals if v.accepted] == [NEW_ID]
    assert "already a technique" in reasons["coalesce_global_access"]
    assert "duplicate of coalesce_global_access" in reasons["coalesced_again"]
    assert "length" in reasons["too_long"]  # msgspec: "Expected `str` of length <= 600"
    assert "prior_speedup" in reasons["no_prior"]
    assert "<= 10.0" in reasons["wild_claim"]
    assert "secret" in reasons["leaky"]
    assert "holds code" in reasons["codey"]
    assert "cosmic_rays" in reasons["made_up"]
    assert any(
        "already a technique" in v.reason or "duplicate" in v.reason
        for v in outcome.proposals
        if v.technique == NEW_ID and not v.accepted
    )
    # the rejected items' JSON is kept beside the reasons, and the secret is not stored
    assert all(v.item for v in outcome.proposals if not v.accepted)
    assert [p.technique.id for p in kb.proposals()] == [NEW_ID]
    assert "sk-abcdefghijklmnop" not in json.dumps(
        [msgspec.to_builtins(t) for t in kb.techniques()]
    )
    (step,) = outcome.steps
    assert step.technique == NEW_ID


def test_more_items_than_asked_are_cut_and_an_unusable_reply_is_reported(openai_server, client, kb):
    harness = RecordedHarness()
    exhaust(kb, harness)
    openai_server.push(
        reply("I can't think of anything."),
        reply("Still nothing, sorry."),  # the JSON retry
    )
    outcome = run_loop(client, kb, harness, depth=1)
    (verdict,) = outcome.proposals
    assert not verdict.accepted and "proposals unusable" in verdict.reason
    # no proposal, and every technique failed on the original: a dead end with nowhere to go
    # back to, so the rollout ends rather than spend its step on one of those failures again
    assert outcome.steps == [] and not outcome.improved and outcome.error is None

    kb2_outcome_items = [
        item(id=f"idea_{n}", description=f"Idea number {n}: " + "a" * 40 * n) for n in range(1, 4)
    ]
    openai_server.push(
        reply(proposals(*kb2_outcome_items)),
        reply(cuda("wrong")),
        reply(cuda("wrong")),
        reply(cuda("wrong")),
        *policy_replies(),
    )
    outcome = run_loop(client, kb, harness, depth=1, proposals_limit=2)
    accepted = [v.technique for v in outcome.proposals if v.accepted]
    cut = [v for v in outcome.proposals if not v.accepted]
    assert accepted == ["idea_1", "idea_2"]
    assert [(v.technique, v.reason) for v in cut] == [("idea_3", "beyond the 2 asked for")]
    assert cut[0].item  # kept like any rejected item


def test_a_proposal_that_keeps_failing_drops_below_the_catalog_and_is_retired(
    openai_server, client, kb
):
    harness = RecordedHarness()
    exhaust(kb, harness)
    state = harness.original_state
    openai_server.push(
        reply(proposals(item())),
        reply(cuda("wrong")),
        reply(cuda("wrong")),
        reply(cuda("wrong")),
        *policy_replies(),
    )
    outcome = run_loop(client, kb, harness, depth=1)
    (step,) = outcome.steps
    assert (step.technique, step.outcome) == (NEW_ID, "wrong_result")
    # on a fresh kernel of the same state, it now ranks below every catalog technique
    ranking = kb.rank(state.arch, state.state, state.findings)
    assert ranking[-1].technique == NEW_ID and ranking[-1].proposal == "proposed"
    # further failures (other kernels' runs) retire it: it is no longer ranked at all
    for n in range(RETIRE_AFTER - 1):
        kb.record(
            Attempt(
                id=f"later-{n}",
                time=1_800_000_000.0 + n,
                arch=state.arch,
                kernel=f"other_kernel_{n}",
                source_hash=f"other{n}",
                candidate_hash="",
                before_state=state.state,
                technique=NEW_ID,
                predicted_speedup=1.05,
                outcome="compile_error",
                target_finding="uncoalesced_global_access",
            )
        )
    (view,) = proposal_views(kb)
    assert view.status == "retired" and view.failures == RETIRE_AFTER
    assert NEW_ID not in {r.technique for r in kb.rank(state.arch, state.state, state.findings)}


def test_no_proposals_while_the_kb_has_techniques_left_or_when_turned_off(
    openai_server, client, kb
):
    harness = RecordedHarness()
    openai_server.push(reply(cuda("verified 0.5")), reply(soft(True)), *policy_replies())
    outcome = run_loop(client, kb, harness, depth=1)
    assert outcome.proposals == [] and outcome.steps[0].outcome == "success"
    state = harness.original_state
    assert why_propose(kb, state, kb.rank(state.arch, state.state, state.findings), "x") is None

    exhaust(kb, harness)
    openai_server.push(
        reply(cuda("wrong")), reply(cuda("wrong")), reply(cuda("wrong")), *policy_replies()
    )
    outcome = run_loop(client, kb, harness, depth=1, proposals_limit=0)
    assert outcome.proposals == [] and kb.proposals() == []


def test_a_state_whose_findings_no_technique_addresses_needs_proposals(kb):
    harness = RecordedHarness()
    # memory-barrier stalls: a real ncu stall reason the catalog has no technique for
    membar = Finding(id="stall_membar", estimated_speedup=40.0, message="membar stalls")
    state = msgspec.structs.replace(harness.original_state, findings=[membar])
    ranked = kb.rank(state.arch, state.state, state.findings)
    assert ranked  # the memory techniques of its state are still ranked
    why = why_propose(kb, state, ranked, "never-tried")
    assert why is not None and "no technique in the knowledge base addresses" in why
    assert "stall_membar" in why


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Use warp shuffles to combine the lanes' partial sums.", None),
        ("Avoid `__syncthreads()` in the loop; use one barrier per tile.", None),
        ("token = ghp_abcdefghijklmnopqrstuvwxyz0123", "secret"),
        ("Authorization: Bearer abcdEFGH1234ijklMNOP5678", "secret"),
        ("-----BEGIN RSA PRIVATE KEY-----", "secret"),
        ("Ask with key AbCdEfGh1234567890IjKlMnOpQrStUvWx99", "secret"),
        ("```cuda\n__global__ void k() {}\n```", "code"),
        ("#include <cuda_fp16.h> first", "code"),
        ("__global__ void fast(float* x) is the new kernel", "code"),
        ("launch kern<<<grid, block>>> twice", "code"),
        ("x[i] = y[i];\nz[i] = w[i];", "code"),
    ],
)
def test_text_checks_tell_secrets_and_code_from_advice(text, problem):
    found = text_problem(how_to_apply=text)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and "how_to_apply" in found


def test_the_similarity_threshold_tells_a_rewording_from_another_technique(kb):
    techniques = {t.id: t for t in kb.techniques()}
    coalesce = techniques["coalesce_global_access"].description
    assert description_similarity(REWORDED, coalesce) >= DUPLICATE_SIMILARITY
    # every two catalog techniques that share a finding say different things
    shared = [
        (a, b)
        for a in techniques.values()
        for b in techniques.values()
        if a.id < b.id and set(a.addresses_findings) & set(b.addresses_findings)
    ]
    assert len(shared) > 20
    assert all(
        description_similarity(a.description, b.description) < DUPLICATE_SIMILARITY
        for a, b in shared
    )
