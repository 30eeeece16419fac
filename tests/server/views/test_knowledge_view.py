"""`kernelblaster.knowledgeBase`: the KB's track records (as `kb show --json` prints them) and
this workspace's part of the replay buffer, found by following source hashes, with the diff of
each kept candidate."""

from __future__ import annotations

import json
import subprocess
import sys

from lsprotocol import types

from kernelblaster.kb.records import code_hash
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.server.pipeline.optimize import kept_candidate_path
from tests.kb.kb_helpers import make_attempt
from tests.server.conftest import (
    open_document,
    softmax_response,
    softmax_source,
    start,
    wait_for_states,
)


async def test_the_view_holds_the_track_record_and_this_workspaces_attempts(client, workspace):
    original = softmax_source()
    source = workspace.add("softmax.cu", original)
    workspace.record("harness", softmax_response(source))
    step1 = original.replace("softmax_rowthread(", "softmax_rowthread( ", 1)
    step2 = step1 + "// coalesced\n"
    kept = kept_candidate_path(source, "softmax_rowthread")
    kept.parent.mkdir(parents=True)
    kept.write_text(step2)
    with KnowledgeBase.open(workspace.kb_path) as kb:
        # another project's attempt, then a chain of two steps starting from this file
        elsewhere = make_attempt(source_hash="f00", candidate_hash="ba4", measured_speedup=3.0)
        first = make_attempt(
            kernel="softmax_rowthread",
            source_hash=code_hash(original),
            candidate_hash=code_hash(step1),
            measured_speedup=1.6,
            predicted_speedup=1.4,
        )
        second = make_attempt(
            kernel="softmax_rowthread",
            source_hash=code_hash(step1),
            candidate_hash=code_hash(step2),
            technique="vectorized_loads",
            outcome="regression",
            measured_speedup=0.9,
        )
        for attempt in (elsewhere, first, second):
            kb.record(attempt)
        kb.add_note("sm_90", "memory.dram", "coalesce_global_access", "transpose through smem")

    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri)
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="kernelblaster.knowledgeBase", arguments=[])
    )

    entries = {e["technique"]: e for e in answer["kb"]["entries"]}
    coalesce = entries["coalesce_global_access"]
    assert coalesce["attempts"] == 2 and coalesce["title"] == "Coalesce global memory accesses"
    assert coalesce["notes"] == ["transpose through smem"]
    assert sorted(m["measured_speedup"] for m in coalesce["measurements"]) == [1.6, 3.0]
    assert [a["id"] for a in answer["kb"]["recent_attempts"]] == [
        second.id,
        first.id,
        elsewhere.id,
    ]
    history = answer["workspace"]
    assert [a["id"] for a in history["attempts"]] == [second.id, first.id]
    line = next(n for n, text in enumerate(original.splitlines()) if "softmax_rowthread(" in text)
    assert history["kernels"] == [{"kernel": "softmax_rowthread", "uri": uri, "line": line}]
    (candidate,) = history["candidates"]
    assert candidate["kernel"] == "softmax_rowthread" and candidate["source_uri"] == uri
    assert candidate["candidate_uri"].endswith(
        "/.kernelblaster/candidates/softmax.softmax_rowthread.best.cu"
    )
    assert "+// coalesced\n" in candidate["diff"] and not candidate["truncated"]

    # the CLI prints the same KB part
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelblaster",
            "kb",
            "--kb",
            str(workspace.kb_path),
            "show",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(printed.stdout)["entries"] == answer["kb"]["entries"]
