"""`kernelblaster optimize` on a GPU with the real harness, against the scripted OpenAI-compatible
server, when the model renames and then splits the kernel (issue 11): the naive softmax pair
(examples/softmax.cu, kernel softmax_rowthread) is rewritten into softmax_rowwarp (a warp per
row), which is verified, profiled under its new name, re-classified, offered and recorded with
its tokens; the next step is asked about softmax_rowwarp and answered with a split into
row_stats + row_normalize, both profiled and kept in the step's record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import openai_server
from bench.openai_server import RecordedRequest, Scripted, reply, reply_by_agent
from kernelblaster.cli import main
from kernelblaster.kb.store import KnowledgeBase

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
RENAMED = (DATA / "softmax_warp.cu").read_text()  # kernel softmax_rowwarp
SPLIT = (DATA / "softmax_split.cu").read_text()  # kernels row_stats, row_normalize
USAGE = (1800, 400)  # prompt and completion tokens of every scripted reply


def _lowering(request: RecordedRequest) -> Scripted:
    """The renamed kernel when asked about softmax_rowthread, the split when asked about
    softmax_rowwarp: a step that still named the original kernel would get no split."""
    if "Kernel `softmax_rowwarp`" in request.prompt_text:
        return reply(f"Split it.\n```cuda\n{SPLIT}```\n", usage=USAGE)
    return reply(f"Renamed it.\n```cuda\n{RENAMED}```\n", usage=USAGE)


def _responder():
    """The lowering agent as above; the other agents a reply that changes nothing."""
    return reply_by_agent(
        {
            "lowering": _lowering,
            "soft_verify": reply(json.dumps({"ok": True, "reasons": []}), usage=USAGE),
            "perf_gap": reply(json.dumps({"analyses": []}), usage=USAGE),
            "parameter_update": reply(json.dumps({"updates": []}), usage=USAGE),
            "state_extractor": reply(
                json.dumps({"state": "memory.dram", "confidence": 0.9, "rationale": "streaming"}),
                usage=USAGE,
            ),
        }
    )


def test_a_rewrite_that_renames_then_splits_the_kernel_is_verified_offered_and_recorded(
    monkeypatch, tmp_path, capsys
):
    source = tmp_path / "softmax.cu"
    shutil.copy(REPO / "examples" / "softmax.cu", source)
    shutil.copy(REPO / "examples" / "softmax.py", tmp_path / "softmax.py")
    kb_path = tmp_path / "kb.sqlite3"
    with openai_server.OpenAITestServer(responder=_responder()) as server:
        monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("KERNELBLASTER_LLM_MODEL", "test-model")
        monkeypatch.setenv("KERNELBLASTER_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("KERNELBLASTER_KB_PATH", str(kb_path))
        code = main(
            [
                "optimize", str(source), "--json", "--rollouts", "1", "--depth", "2",
                "--technique", "warp_shuffle_reduction", "--seed", "1",
            ]
        )  # fmt: skip
        lowering_prompts = [
            r.prompt_text for r in server.chat_requests if "\nApply: " in r.prompt_text
        ]
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    print(json.dumps(result["steps"], indent=1))  # the record, for the GPU run's log

    assert code == 0, captured.err
    assert result["error"] is None, result["error"]
    renamed, split = result["steps"]
    # step 1: renamed, verified, profiled and classified under its new name, faster
    assert renamed["outcome"] == "success", renamed["detail"]
    assert [k["name"] for k in renamed["kernels_after"]] == ["softmax_rowwarp"]
    assert renamed["kernels_after"][0]["time_share"] == pytest.approx(1.0)
    assert renamed["state_after"] == renamed["kernels_after"][0]["state"]
    assert renamed["prompt_tokens"] >= 2 * USAGE[0]  # lowering + soft verification
    # step 2 started from the renamed kernel: asked about it, ranked from its state
    assert "Kernel `softmax_rowwarp`" in lowering_prompts[1]
    assert split["state_before"] == renamed["state_after"]
    # step 2: split in two; verified (faster or not), both kernels in the record, dominant first
    assert split["outcome"] in ("success", "regression"), split["detail"]
    kernels = split["kernels_after"]
    assert sorted(k["name"] for k in kernels) == ["row_normalize", "row_stats"]
    assert kernels[0]["time_share"] >= kernels[1]["time_share"] > 0
    assert sum(k["time_share"] for k in kernels) == pytest.approx(1.0)
    assert split["state_after"] == kernels[0]["state"]
    # where each step's time went: ncu's pass only for the candidate step 2 went on from
    for step in (renamed, split):
        phases = step["phases"]
        assert min(phases[p] for p in ("evaluation", "build", "verify", "timing")) > 0, phases
        assert phases["quick_profile"] > 0 and phases["llm_wait"] > 0, phases
        assert phases["evaluation"] >= phases["timing"] + phases["quick_profile"]
    assert renamed["phases"]["full_profile"] > 0 and split["phases"]["full_profile"] == 0
    assert result["wall_s"] >= result["rollouts_wall_s"] > 0
    # offered: the best verified, memory-safe candidate, written beside the source
    assert result["improved"] and result["speedup"] > 1.0
    best = (tmp_path / "softmax.optimized.cu").read_text()
    assert best == result["best_source"]
    assert "softmax_rowwarp" in best or "row_normalize" in best
    # recorded in the KB with the tokens spent, every attempt
    with KnowledgeBase.open(kb_path) as kb:
        attempts = kb.attempts()
    assert sorted(a.candidate_hash for a in attempts) == sorted(
        s["candidate_hash"] for s in result["steps"]
    )
    assert all(a.prompt_tokens >= 2 * USAGE[0] for a in attempts)
    assert result["prompt_tokens"] >= sum(a.prompt_tokens for a in attempts)
