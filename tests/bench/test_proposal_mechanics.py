"""The prepared proposal mechanics run (bench/proposal_mechanics.py) without a GPU: its rewrite
builds with nvcc and keeps row_sum's launcher, and its scripted model drives the real loop (with
a recorded harness standing in for the GPU) through the path the GPU run takes: every catalog
technique declined and recorded on the source, then one proposal, applied in the next step,
verified and recorded. The run itself: `python3 -m bench.proposal_mechanics`."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pytest

from bench import openai_server
from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.harness.analysis.cuda_source import extern_c_functions
from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.kb.catalog import load_catalog
from kernelblaster.kb.proposals import proposal_views
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings
from tests.agents.loop.test_loop import RecordedHarness

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scripted() -> dict:
    return runpy.run_module("bench.proposal_mechanics", run_name="proposal_mechanics")


@pytest.mark.nvcc
def test_the_rewrite_builds_and_keeps_the_launcher(scripted, tmp_path):
    rewrite = scripted["REWRITE"]
    original = (REPO / "examples" / "row_sum.cu").read_text()
    (mine,), (theirs,) = extern_c_functions(rewrite.read_text()), extern_c_functions(original)
    assert (mine.name, mine.params) == (theirs.name, theirs.params)
    result = build(
        BuildSpec(source=str(rewrite), output_kind="shared"),
        Settings(arch="sm_90", cache_dir=str(tmp_path)),
    )
    assert result.ok, [d.message for d in result.diagnostics]
    assert [d.message for d in result.diagnostics] == []


class _Harness(RecordedHarness):
    """The original row_sum is verified in softmax_rowthread's recorded state; the scripted
    rewrite verifies 4x faster; nothing else reaches the harness in this run."""

    def __init__(self, rewrite: str):
        super().__init__()
        self.rewrite = rewrite

    def __call__(self, source, text, kernel, settings, **options):
        if text == self.rewrite:
            text = "#define KB_RESULT_verified_0.25\n" + text
        elif "KB_RESULT" not in text:
            text = "#define KB_RESULT_original_1.0\n" + text
        return super().__call__(source, text, kernel, settings, **options)


def test_the_scripted_model_drives_the_loop_to_a_verified_proposal(scripted, tmp_path):
    for name in ("row_sum.cu", "row_sum.py"):
        shutil.copy(REPO / "examples" / name, tmp_path / name)
    script = scripted["Script"](openai_server)
    depth = len(load_catalog().technique) + 2
    request = OptimizeRequest(
        source=str(tmp_path / "row_sum.cu"),
        source_text=(tmp_path / "row_sum.cu").read_text(),
        kernel="row_sum_serial",
        rollouts=1,
        depth=depth,
        seed=0,
        proposals=1,
    )
    harness = _Harness(script.rewrite)
    with (
        openai_server.OpenAITestServer(responder=script.respond) as server,
        KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb,
    ):
        client = LlmClient(
            LlmConfig(base_url=server.base_url, model="test-model", timeout_s=10, max_retries=0)
        )
        result = run_optimization(
            OptimizeRun(request=request, client=client, kb=kb, evaluate=harness)
        )
        views = proposal_views(kb)
        attempts = kb.attempts(technique=scripted["PROPOSED"])
    proposed = scripted["PROPOSED"]
    assert result.error is None
    (verdict,) = [v for v in result.proposals if v.accepted]
    assert verdict.technique == proposed
    (step,) = [s for s in result.steps if s.technique == proposed]
    assert (step.outcome, step.measured_speedup) == ("success", 4.0)
    # before it, every ranked catalog technique was declined and recorded on the source
    before = result.steps[: result.steps.index(step)]
    assert before and all(s.outcome == "error" for s in before)
    assert len({s.technique for s in before}) == len(before)
    # three replies per declined step (the lowering agent's format retries), none after
    errors = [s for s in result.steps if s.outcome == "error"]
    assert script.declined == 3 * len(errors)
    assert "already tried on this kernel" in script.proposal_prompts[0]
    (view,) = views
    assert (view.kernel, view.model, view.successes) == ("row_sum_serial", "test-model", 1)
    assert [a.outcome for a in attempts] == ["success"]
    assert result.improved and result.techniques == [proposed]
