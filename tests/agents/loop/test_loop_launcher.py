"""The loop follows the launcher, not a kernel name: candidates that rename or split kernels are
profiled and classified as they are (worker responses built from a real H200 ncu report, whose
kernels the rewrite renamed), every LLM call's tokens are counted whatever the outcome, a
failure of the harness itself never counts against a technique, enablers are judged by what
they lead to, and `optimize --reference` pairs a file that its name does not."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import msgspec
import pytest

from bench.openai_server import reply, server_error
from kernelblaster.agents.loop.evaluation import Evaluation, evaluation_of
from kernelblaster.agents.loop.plan import CHAIN_DISCOUNT
from kernelblaster.agents.loop.run import OptimizeRun, constraints_for, run_optimization
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    ProfileReport,
    VerifyResult,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.harness.target.targets import resolve_target
from kernelblaster.kb.catalog import enablers
from kernelblaster.settings import Settings
from tests.agents.loop.test_loop import H200, SOFTMAX, RecordedHarness, cuda, run_loop, soft, timing


def _renamed(report: ProfileReport, names: dict[str, str]) -> ProfileReport:
    """`report` with only the kernels named in `names`, renamed as a rewrite would name them."""
    kept = [
        msgspec.structs.replace(kernel, name=names[kernel.name])
        for kernel in report.kernels
        if kernel.name in names
    ]
    return msgspec.structs.replace(report, kernels=kept)


class LauncherHarness(RecordedHarness):
    """Candidates marked `KB_RESULT_renamed_<ms>` launch one kernel under a new name (the
    measured profile of the streaming relu_naive); `KB_RESULT_split_<ms>` launch two (relu_naive
    as `row_max`, 211 µs, and softmax_rowthread as `row_normalize`, 477 µs). Their evaluation
    goes through `evaluation_of`, the loop's own reading of a worker response."""

    def __init__(self):
        super().__init__()
        self.report = read_report(H200)
        self.asked_for: list[str | None] = []

    def __call__(self, source, text, kernel, settings, **options) -> Evaluation:
        match = re.search(r"KB_RESULT_(renamed|split)_([\d.]+)", text)
        if match is None:
            return super().__call__(source, text, kernel, settings, **options)
        self.asked_for.append(kernel)
        names = (
            {"relu_naive": "softmax_block_per_row"}
            if match.group(1) == "renamed"
            else {"relu_naive": "row_max", "softmax_rowthread": "row_normalize"}
        )
        profile = _renamed(self.report, names)
        response = WorkerResponse(
            build=BuildResult(ok=True, source=str(source), arch="sm_90"),
            check=CheckResult(
                source=str(source),
                target_kind="plain",
                timing=timing(float(match.group(2))),
                verify=VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, message="matches"),
            ),
            profile=profile,
            states=classify_report(profile),
        )
        return evaluation_of(response, kernel)


def _policy_update() -> tuple:
    return reply(json.dumps({"analyses": []})), reply(json.dumps({"updates": []}))


def test_a_rewrite_that_renames_its_kernel_is_verified_reclassified_and_offered(
    openai_server, client, kb
):
    harness = LauncherHarness()
    openai_server.push(
        reply(cuda("renamed 0.5")),
        reply(soft(True)),
        reply(cuda("broken")),  # step 2 starts from the renamed kernel
        reply(cuda("broken")),
        reply(cuda("broken")),
        *_policy_update(),
    )
    result = run_loop(client, kb, harness, rollouts=1, depth=2)

    assert result.error is None
    first, second = result.steps
    assert first.outcome == "success" and first.measured_speedup == pytest.approx(2.0)
    assert first.state_after == harness.candidate_state.state  # relu_naive's measured state
    assert [(k.name, k.time_share, k.state) for k in first.kernels_after] == [
        ("softmax_block_per_row", 1.0, harness.candidate_state.state)
    ]
    # the candidate was evaluated by what it launches (also under compute-sanitizer before it
    # was offered), never by the original kernel's name
    assert harness.asked_for == [None, None]
    # the next step ranks from the renamed kernel's state and prompts with its name
    assert second.state_before == harness.candidate_state.state
    prompts = [r.prompt_text for r in openai_server.chat_requests if "Kernel `" in r.prompt_text]
    assert "Kernel `softmax_rowthread`" in prompts[0]
    assert "Kernel `softmax_block_per_row`" in prompts[1]
    # offered, and recorded with its tokens (100 prompt + 50 completion per scripted reply)
    assert result.improved and "KB_RESULT_renamed_0.5" in result.best_source
    attempt = next(a for a in kb.attempts() if a.outcome == "success")
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (200, 100)
    assert attempt.after_state == harness.candidate_state.state


def test_a_split_into_two_kernels_takes_the_state_of_the_one_with_most_gpu_time(
    openai_server, client, kb
):
    harness = LauncherHarness()
    openai_server.push(reply(cuda("split 0.5")), reply(soft(True)), *_policy_update())
    result = run_loop(client, kb, harness, rollouts=1, depth=1)

    (step,) = result.steps
    measured = {k.name: k.duration_ns for k in harness.report.kernels}
    relu_ns, softmax_ns = measured["relu_naive"], measured["softmax_rowthread"]
    dominant, other = step.kernels_after
    assert (dominant.name, other.name) == ("row_normalize", "row_max")
    assert dominant.time_share == pytest.approx(softmax_ns / (relu_ns + softmax_ns))
    assert other.time_share == pytest.approx(relu_ns / (relu_ns + softmax_ns))
    assert dominant.state == harness.original_state.state  # softmax_rowthread's profile
    assert other.state == harness.candidate_state.state
    assert step.state_after == dominant.state and step.outcome == "success"
    assert result.improved


def test_an_error_step_keeps_the_tokens_it_spent(openai_server, client, kb):
    """The issue's case: the candidate reached the harness, which failed on its own (here ncu's
    counter permission); ~the reply's tokens were spent and must be in the attempt and totals."""

    class NoCounters(RecordedHarness):
        def __call__(self, source, text, kernel, settings, **options):
            if "KB_RESULT" not in text:
                return super().__call__(source, text, kernel, settings, **options)
            error = HarnessError(kind="counter_permission", message="ERR_NVGPUCTRPERM")
            return Evaluation(outcome="error", error=error)

    openai_server.push(reply(cuda("verified 0.5"), usage=(1500, 600)))
    result = run_loop(client, kb, NoCounters(), rollouts=1, depth=1)
    (step,) = result.steps
    assert step.outcome == "infrastructure" and step.error_kind == "harness"
    assert (step.prompt_tokens, step.completion_tokens) == (1500, 600)
    (attempt,) = kb.attempts()
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (1500, 600)
    assert (result.prompt_tokens, result.completion_tokens) == (1500, 600)


def test_tokens_spent_before_the_endpoint_fails_are_counted(openai_server, make_client, kb):
    client = make_client(max_retries=0)
    openai_server.push(reply(cuda("broken"), usage=(700, 300)), server_error(500))
    result = run_loop(client, kb, RecordedHarness(), rollouts=1, depth=1)
    (step,) = result.steps
    assert step.fatal and step.error_kind == "LLM" and step.outcome == "infrastructure"
    assert (step.prompt_tokens, step.completion_tokens) == (700, 300)
    assert (result.prompt_tokens, result.completion_tokens) == (700, 300)
    assert kb.attempts()[0].prompt_tokens == 700


def test_a_harness_failure_does_not_count_against_the_technique(openai_server, client, kb):
    class NoGpu(RecordedHarness):
        def __call__(self, source, text, kernel, settings, **options):
            if "KB_RESULT" not in text:
                return super().__call__(source, text, kernel, settings, **options)
            return Evaluation(outcome="error", error=HarnessError(kind="no_gpu", message="none"))

    harness = NoGpu()
    state = harness.original_state
    before = {r.technique: r for r in kb.rank(state.arch, state.state, state.findings)}
    openai_server.push(reply(cuda("verified 0.5")))
    result = run_loop(client, kb, harness, rollouts=1, depth=1)
    (step,) = result.steps
    assert result.error is not None and "harness" in result.error
    after = {r.technique: r for r in kb.rank(state.arch, state.state, state.findings)}
    # recorded (its tokens are history), but the technique's record and prediction are unchanged
    assert [a.outcome for a in kb.attempts()] == ["infrastructure"]
    assert after[step.technique].attempts == after[step.technique].failures == 0
    assert after[step.technique].predicted_speedup == before[step.technique].predicted_speedup


def test_a_profiler_timeout_after_a_verified_timed_run_is_the_harness_fault():
    check = CheckResult(
        source="k.cu",
        target_kind="plain",
        timing=timing(0.5),
        verify=VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4),
    )
    timeout = HarnessError(kind="timeout", message="ncu did not finish within 120 s.")
    ok = BuildResult(ok=True, source="k.cu", arch="sm_90")
    profiled = evaluation_of(WorkerResponse(build=ok, check=check, error=timeout), None)
    assert profiled.outcome == "error" and profiled.error is timeout and profiled.feedback is None
    # the same timeout before any timing is the candidate's: a hang the model is told about
    hung = evaluation_of(WorkerResponse(build=ok, error=timeout), None)
    assert hung.outcome == "timeout" and hung.feedback is not None and hung.error is None


def _forced(client, kb, harness, technique: str, depth: int):
    request = OptimizeRequest(
        source=str(SOFTMAX),
        source_text=SOFTMAX.read_text(),
        kernel="softmax_rowthread",
        technique=technique,
        rollouts=1,
        depth=depth,
        seed=3,
        settings=Settings(),
    )
    return run_optimization(OptimizeRun(request=request, client=client, kb=kb, evaluate=harness))


def test_an_enabler_step_is_kept_and_judged_by_the_best_result_built_on_it(
    openai_server, client, kb
):
    assert "shared_memory_tiling" in enablers()
    openai_server.push(
        reply(cuda("verified 1.2")),  # tiling alone: verified but slower (1.0 → 1.2 ms)
        reply(soft(True)),
        reply(cuda("verified 0.5")),  # built on it: 1.2 → 0.5 ms
        reply(soft(True)),
        *_policy_update(),
    )
    result = _forced(client, kb, RecordedHarness(), "shared_memory_tiling", depth=2)

    tiling, built_on = result.steps
    assert tiling.enabler and tiling.outcome == "success"
    # judged by the best reached, discounted
    assert tiling.measured_speedup == pytest.approx((1.0 / 0.5) ** CHAIN_DISCOUNT)
    assert "0.83x on its own" in tiling.detail
    assert built_on.measured_speedup == pytest.approx(1.2 / 0.5)
    assert "KB_RESULT_verified_1.2" not in (result.best_source or "")
    assert result.improved and result.speedup == pytest.approx(2.0)
    (recorded,) = [a for a in kb.attempts() if a.candidate_hash == tiling.candidate_hash]
    assert recorded.outcome == "success"
    assert recorded.measured_speedup == pytest.approx(2.0**CHAIN_DISCOUNT)


def test_an_enabler_that_leads_nowhere_is_a_regression_and_without_depth_is_not_kept(
    openai_server, client, kb
):
    openai_server.push(
        reply(cuda("verified 1.25")),
        reply(soft(True)),
        reply(cuda("wrong")),
        reply(cuda("wrong")),
        reply(cuda("wrong")),
        *_policy_update(),
    )
    result = _forced(client, kb, RecordedHarness(), "shared_memory_tiling", depth=2)
    tiling, failed = result.steps
    assert tiling.enabler and tiling.outcome == "regression"
    assert tiling.measured_speedup == pytest.approx(0.8)
    assert failed.outcome == "wrong_result" and not result.improved
    # with no depth left there is nothing to build on: an ordinary regression
    openai_server.push(reply(cuda("verified 1.25")), reply(soft(True)), *_policy_update())
    (alone,) = _forced(client, kb, RecordedHarness(), "shared_memory_tiling", depth=1).steps
    assert not alone.enabler and alone.outcome == "regression"
    assert alone.measured_speedup == pytest.approx(0.8)


@pytest.mark.nvcc
@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None,
    reason="with a GPU the run goes past the pairing: the GPU test covers that",
)
def test_optimize_reference_pairs_a_file_its_name_does_not(
    openai_server, tmp_path, monkeypatch, capsys
):
    from kernelblaster.cli import main

    better = tmp_path / "softmax.better.cu"
    shutil.copy(SOFTMAX, better)
    shutil.copy(SOFTMAX.with_suffix(".py"), tmp_path / "softmax.py")
    monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("KERNELBLASTER_LLM_MODEL", "test-model")
    monkeypatch.setenv("KERNELBLASTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELBLASTER_KB_PATH", str(tmp_path / "kb.sqlite3"))
    argv = ["optimize", str(better), "--json", "--rollouts", "1", "--depth", "1"]

    assert main(argv) == 1
    unpaired = json.loads(capsys.readouterr().out)
    assert "softmax.better.py" in unpaired["error"]  # it looked for its namesake only

    assert main([*argv, "--reference", str(tmp_path / "nope.py")]) == 2
    assert "the reference" in capsys.readouterr().err

    code = main([*argv, "--reference", str(tmp_path / "softmax.py")])
    paired = json.loads(capsys.readouterr().out)
    # paired: it got past finding a reference to building and checking, which needs a GPU here
    assert code == 1 and "softmax.better.py" not in paired["error"]
    assert "can't be optimized until it verifies" in paired["error"]


def test_a_rewrite_of_an_extensions_kernels_keeps_what_its_bindings_call():
    examples = Path(__file__).resolve().parents[3] / "examples"
    split = resolve_target(examples / "bias_gelu_scale_split.cu", Settings())
    rules = constraints_for(split, Settings())
    assert rules[0] == (
        "Keep `bias_gelu_scale` with exactly the same signature and calling convention."
    )
    assert any("bias_gelu_scale_split.cpp" in rule and "torch headers" in rule for rule in rules)
    single = resolve_target(examples / "bias_gelu_scale.cu", Settings())
    assert constraints_for(single, Settings())[0].startswith("Keep `forward` with")
