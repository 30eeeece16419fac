"""Hover and code actions, answered from cached results and ranked by a real KB that holds a
track record (attempts recorded through the KB's own API)."""

from __future__ import annotations

import time
import uuid

from lsprotocol import types

from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.kb.ranking import finding_gains, target_finding
from kernelblaster.kb.records import Attempt
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.server.views.code_actions import optimize_title
from tests.server.conftest import (
    open_document,
    softmax_response,
    softmax_source,
    start,
    wait_for_states,
)


def tiling_target(kb: KnowledgeBase, state: PerfState) -> str:
    """The finding of `state` shared-memory tiling is aimed at (what its attempts record)."""
    tiling = next(t for t in kb.techniques() if t.id == "shared_memory_tiling")
    return target_finding(tiling, finding_gains(state.findings))


def record_attempts(kb_path, state: PerfState) -> None:
    with KnowledgeBase.open(kb_path) as kb:
        for measured, outcome in (
            (4.1, "success"),
            (3.9, "success"),
            (4.3, "success"),
            (0.9, "regression"),
        ):
            kb.record(
                Attempt(
                    id=uuid.uuid4().hex,
                    time=time.time(),
                    arch="sm_90",
                    kernel="softmax_rowthread",
                    source_hash="a",
                    candidate_hash="b",
                    before_state=state.state,
                    technique="shared_memory_tiling",
                    predicted_speedup=3.0,
                    measured_speedup=measured,
                    outcome=outcome,
                    target_finding=tiling_target(kb, state),
                )
            )


async def open_softmax(client, workspace, **settings):
    source = workspace.add("softmax.cu", softmax_source())
    response = softmax_response(source)
    workspace.record("harness", response)
    kernel = response.profile.kernels[0]
    state = classify(kernel, arch=response.profile.arch, device=response.profile.device)
    record_attempts(workspace.kb_path, state)
    await start(client, workspace, **settings)
    uri = open_document(client, source)
    await wait_for_states(client, uri)
    return uri, state


async def test_hover_shows_state_times_and_ranked_techniques(client, workspace):
    uri, state = await open_softmax(client, workspace)
    # on the kernel's name (line 4 of softmax.cu)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(4, 20)
        )
    )
    assert hover.contents.kind == types.MarkupKind.Markdown
    text = hover.contents.value
    assert text.startswith("### `softmax_rowthread`")
    assert f"**{state.summary}**" in text
    assert "state `memory.l1` on sm_90" in text
    # each time says what it is; the table's header has a cell per column
    assert "| time | value |\n|:---|---:|\n" in text
    assert "| per call, whole target (median of 50 runs) | 0.481 ms |" in text
    assert "| PyTorch eager, per call | 0.0477 ms (speedup 0.10×) |" in text
    assert "| kernel duration (ncu, one profiled launch) | 0.477 ms |" in text
    assert "| achieved_occupancy_pct | 6.22 |" in text
    assert "- `uncoalesced_global_access`" in text
    # Nsight Compute's estimate in its own terms: a share of the runtime, bounding the speedup
    assert "(ncu: up to 87% of runtime could be saved (≤ 7.9×))" in text  # 1/(1-0.873)
    assert "Headroom: L1 runs at" in text  # memory.l1: the unit that limits it
    # the KB's ranking, with its track record for shared-memory tiling
    assert "**Optimizations ranked by the knowledge base for `memory.l1` on sm_90:**" in text
    tiling = next(line for line in text.splitlines() if "Shared-memory tiling" in line)
    with KnowledgeBase.open(workspace.kb_path) as kb:
        target = tiling_target(kb, state)
    assert target == "stall_long_scoreboard"
    assert tiling.endswith(
        f"3 faster, 1 slower, 0 failed, mean 2.80× in 4 attempts on sm_90 on kernels with {target}"
    )
    # how many outcomes each prediction rests on, beside the prediction
    assert " from 4 outcomes (confidence " in tiling
    untried = next(line for line in text.splitlines() if "no attempts yet" in line)
    assert " from the prior alone (confidence " in untried
    assert "no attempts yet (basis: ncu estimate)" in text
    # inside the body there is no hover (the editor's C++ server owns that)
    body = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(8, 10)
        )
    )
    assert body is None


async def test_code_actions_offer_top_k_techniques_with_predicted_gains(client, workspace):
    uri, state = await open_softmax(client, workspace, topK=2)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(8, 4), types.Position(8, 4)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    with KnowledgeBase.open(workspace.kb_path) as kb:
        kb_ranking = kb.rank(state.arch, state.state, state.findings)
    # the best two, but shared-memory tiling's measured record (3 of 4 faster) is not left out
    # for the second untried one
    expected = [kb_ranking[0], next(t for t in kb_ranking if t.technique == "shared_memory_tiling")]
    assert kb_ranking[1].attempts == 0 and kb_ranking[1].technique != "shared_memory_tiling"
    assert [a.title for a in actions] == [optimize_title(t) for t in expected] + ["Optimize kernel"]
    assert actions[0].title.startswith(
        "Optimize kernel: coalesce global memory accesses (predicted "
    )
    # the titles come from this KB's track record, not the catalog alone
    with KnowledgeBase.open(workspace.root.parent / "fresh.sqlite3") as fresh:
        prior = {
            t.technique: t.predicted_speedup
            for t in fresh.rank(state.arch, state.state, state.findings)
        }
    learned = {t.technique: t.predicted_speedup for t in kb_ranking}
    assert learned["shared_memory_tiling"] != prior["shared_memory_tiling"]
    assert actions[0].command.command == "kernelblaster.optimize"
    assert list(actions[0].command.arguments) == [
        {
            "uri": uri,
            "kernel": "softmax_rowthread",
            "technique": expected[0].technique,
            "version": 1,
        }
    ]
    assert actions[-1].command.arguments[0]["technique"] is None
    assert all(a.disabled is None for a in actions)
    # outside any kernel: nothing
    outside = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert list(outside) == []


async def test_untried_techniques_above_a_measured_record_are_labelled_as_exploring(
    client, workspace
):
    """The ranking may put a technique with no attempts (its prior raised by ncu's estimate)
    above one with a measured record; its action then says it is untried, an exploration, and
    the measured one says how many of its attempts were faster."""
    uri, state = await open_softmax(client, workspace, topK=8)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(8, 4), types.Position(8, 4)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    titles = [a.title for a in actions if a.title != "Optimize kernel"]
    with KnowledgeBase.open(workspace.kb_path) as kb:
        ranked = kb.rank(state.arch, state.state, state.findings)[:8]
    tiling = next(i for i, t in enumerate(ranked) if t.technique == "shared_memory_tiling")
    assert any(t.attempts == 0 for t in ranked[:tiling]), "an untried technique ranks above it"
    assert titles[tiling].endswith(
        " tiling for data reuse (predicted 2.64×; 3 of 4 attempts faster)"
    )
    assert titles[0] == (
        "Optimize kernel: coalesce global memory accesses "
        "(predicted 2.75×; untried — exploring, from ncu's estimate)"
    )
    for technique, title in zip(ranked, titles, strict=True):
        assert ("untried — exploring, from " in title) == (technique.attempts == 0), title
