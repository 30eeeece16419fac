"""The whole optimization loop against a real HTTP server speaking the OpenAI API, with
scripted replies, and recorded harness results (real ncu profiles from the shared fixtures
stand in for the GPU run of each candidate)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from bench.openai_server import rate_limited, reply
from kernelblaster.agents.llm.lowering import Feedback
from kernelblaster.agents.loop.evaluation import Evaluation, evaluation_of
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.optimize_protocol import OptimizeMessage, OptimizeRequest
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HackFinding,
    SanitizerRun,
    Timing,
    VerifyResult,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.kb.records import code_hash
from kernelblaster.settings import Settings

REPO = Path(__file__).resolve().parents[3]
SOFTMAX = REPO / "examples" / "softmax.cu"
H200 = REPO / "tests" / "fixtures" / "ncu" / "h200-naive3" / "probe.ncu-rep"


SANITIZER_PASSED = SanitizerRun(
    status="passed",
    tools=["memcheck", "racecheck"],
    inputs="get_inputs() at batch_size 32 instead of 512",
    seconds=1.5,
)


def timing(ms: float) -> Timing:
    return Timing(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, repetitions=10)


class RecordedHarness:
    """Answers `evaluate()` from a `#define KB_RESULT_<verdict>[_<ms>]` line in the candidate, with
    states classified from a real H200 report: the original is softmax_rowthread, candidates
    take relu_naive's state (what a coalesced rewrite turns into: a streaming kernel)."""

    def __init__(self):
        report = read_report(H200)
        by_name = {k.name: k for k in report.kernels}
        self.original_state = classify(by_name["softmax_rowthread"], arch=report.arch)
        self.candidate_state = classify(by_name["relu_naive"], arch=report.arch)
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, source, text, kernel, settings, **options) -> Evaluation:
        match = re.search(r"KB_RESULT_([a-z]+)(?:_([\d.]+))?", text)
        verdict, ms = (match.group(1), float(match.group(2) or 0)) if match else ("original", 1.0)
        self.calls.append((verdict, options))
        if verdict in ("original", "verified", "unsafe") and not (
            verdict == "unsafe" and options.get("sanitize")
        ):
            state = self.original_state if verdict == "original" else self.candidate_state
            check = CheckResult(
                source=str(source),
                target_kind="plain",
                timing=timing(ms or 1.0),
                eager=timing(0.8),
                compiled=timing(0.6),
                verify=VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, message="matches"),
                sanitizer=SANITIZER_PASSED if options.get("sanitize") else None,
            )
            return Evaluation(outcome="verified", check=check, state=state, time_ms=ms or 1.0)
        if verdict == "unsafe":  # memcheck's finding, merged into the verification as a check does
            found = "Invalid __global__ write of size 4 bytes in softmax_rowthread (line 12)"
            check = CheckResult(
                source=str(source),
                target_kind="plain",
                verify=VerifyResult(
                    ok=False,
                    trials=3,
                    atol=1e-4,
                    rtol=1e-4,
                    message=found,
                    hacks=[HackFinding(kind="memcheck", message=found, line=12)],
                ),
                sanitizer=SanitizerRun(
                    status="failed", reason=found, tools=["memcheck"], inputs="get_inputs()"
                ),
            )
            return evaluation_of(WorkerResponse(check=check), None)
        outcomes = {
            "broken": ("compile_error", "compile_error", "line 3: error: expected ';'"),
            "wrong": ("wrong_result", "wrong_result", "output 0 differs in 12 elements"),
            "hack": ("rejected", "hack", "calls `cublasSgemm` instead of its own kernel"),
        }
        outcome, kind, message = outcomes[verdict]
        return Evaluation(outcome=outcome, feedback=Feedback(kind=kind, message=message))


# the policy update's two calls, answered with no change
POLICY_UPDATE = (reply(json.dumps({"analyses": []})), reply(json.dumps({"updates": []})))


def cuda(result: str) -> str:
    marker = f"#define KB_RESULT_{result.replace(' ', '_')}\n"
    body = marker + SOFTMAX.read_text()
    return f"Here you go.\n```cuda\n{body}```\n"


def soft(ok: bool, reason: str = "") -> str:
    return json.dumps({"ok": ok, "reasons": [reason] if reason else []})


def run_loop(
    client, kb, harness, *, rollouts=2, depth=2, k=3, seed=7, settings=None, **run_options
):
    request = OptimizeRequest(
        source=str(SOFTMAX),
        source_text=SOFTMAX.read_text(),
        kernel="softmax_rowthread",
        rollouts=rollouts,
        depth=depth,
        top_k=k,
        seed=seed,
        settings=settings or Settings(),
    )
    return run_optimization(
        OptimizeRun(request=request, client=client, kb=kb, evaluate=harness, **run_options)
    )


def test_loop_keeps_only_verified_faster_candidates_and_records_every_attempt(
    openai_server, client, kb
):
    harness = RecordedHarness()
    openai_server.push(
        # rollout 1, step 1: no code, then a compile error, then a verified 2x candidate
        reply("I would tile it."),
        reply(cuda("broken")),
        reply(cuda("verified 0.5")),
        reply(soft(True)),
        # rollout 1, step 2: wrong, reward hack, wrong again: out of retries
        reply(cuda("wrong")),
        reply(cuda("hack")),
        reply(cuda("wrong")),
        # rollout 2, step 1: rate limited first; verified but the soft verifier objects
        rate_limited("0"),
        reply(cuda("verified 0.8")),
        reply(soft(False, "skips the max pass: wrong for large inputs")),
        # rollout 2, step 2: verified but slower than where it started
        reply(cuda("verified 1.3")),
        reply(soft(True)),
        # policy update: gap analysis, then parameter updates (validated in test_policy_update)
        reply(json.dumps({"analyses": []})),
        reply(json.dumps({"updates": []})),
    )
    outcome = run_loop(client, kb, harness)

    assert outcome.error is None
    assert [s.outcome for s in outcome.steps] == [
        "success",
        "wrong_result",
        "rejected",
        "regression",
    ]
    assert outcome.improved and outcome.speedup == pytest.approx(2.0)
    assert "KB_RESULT_verified_0.5" in outcome.best_source
    assert outcome.speedup_vs_eager == pytest.approx(1.6)
    assert outcome.speedup_vs_compile == pytest.approx(1.2)
    # the state is re-derived after the verified step, and the next step starts from it
    first, second = outcome.steps[0], outcome.steps[1]
    assert first.state_before == harness.original_state.state
    assert first.state_after == harness.candidate_state.state
    assert second.state_before == harness.candidate_state.state
    # every attempt is in the KB, with tokens
    attempts = kb.attempts()
    assert sorted(a.outcome for a in attempts) == sorted(
        ["success", "wrong_result", "rejected", "regression"]
    )
    assert all(a.prompt_tokens > 0 for a in attempts)
    assert outcome.prompt_tokens >= sum(a.prompt_tokens for a in attempts)
    # each with the finding of the kernel it started from that its technique was aimed at
    original = {f.id for f in harness.original_state.findings}
    assert first.target_finding in original
    assert {a.target_finding for a in attempts} == {s.target_finding for s in outcome.steps}
    # the best candidate went through compute-sanitizer before being offered
    assert ("verified", {"sanitize": True, "profile": False}) in harness.calls


def test_a_candidate_failing_the_sanitizer_is_not_offered(openai_server, client, kb):
    """compute-sanitizer ran and found an out-of-bounds write: a real rejection, recorded in
    the KB against the technique, and said in the result (never silent): which candidate and
    what the tool found."""
    harness = RecordedHarness()
    openai_server.push(reply(cuda("unsafe 0.4")), reply(soft(True)), *POLICY_UPDATE)
    outcome = run_loop(client, kb, harness, rollouts=1, depth=1)
    assert not outcome.improved and outcome.best_source is None and outcome.sanitizer is None
    assert [a.outcome for a in kb.attempts()].count("rejected") == 1
    rejected = next(a for a in kb.attempts() if a.outcome == "rejected")
    assert rejected.error_kind == "sanitizer"
    (passed,) = outcome.passed_over
    assert (passed.rollout, passed.depth, passed.speedup) == (0, 0, pytest.approx(2.5))
    assert passed.reason.startswith("compute-sanitizer memcheck found Invalid __global__ write")
    assert outcome.message == (
        "no verified candidate beat the original; 2.50x candidate of rollout 1 step 1 "
        f"({passed.technique}) not adopted: {passed.reason}"
    )
    assert outcome.warning == outcome.message.split("; ", 1)[1]
    # recorded against the original kernel, aimed at the finding its step was aimed at there
    (step,) = outcome.steps
    assert rejected.target_finding == step.target_finding
    assert step.target_finding in {f.id for f in harness.original_state.findings}


def test_the_loops_result_is_what_the_server_reads_and_each_step_is_a_kb_row(
    openai_server, client, kb
):
    harness = RecordedHarness()
    openai_server.push(
        reply(cuda("broken")),
        reply(cuda("verified 0.5")),
        reply(soft(True)),
        reply(json.dumps({"analyses": []})),
        reply(json.dumps({"updates": []})),
    )
    result = run_loop(client, kb, harness, rollouts=1, depth=1)
    # The optimize worker writes the loop's record as it is; the server decodes the same record.
    line = msgspec.json.Encoder().encode(result)
    assert msgspec.json.Decoder(OptimizeMessage).decode(line) == result
    (step,) = result.steps
    assert result.techniques == [step.technique]
    assert result.message == (
        f"2.00x faster ({step.technique}), verified on fresh inputs; compute-sanitizer "
        "memcheck, racecheck passed on get_inputs() at batch_size 32 instead of 512"
    )
    assert result.sanitizer == SANITIZER_PASSED and result.warning == ""
    (attempt,) = kb.attempts()
    assert (attempt.technique, attempt.outcome, attempt.after_state) == (
        step.technique,
        "success",
        step.state_after,
    )
    assert attempt.source_hash == step.source_hash == code_hash(SOFTMAX.read_text())
    assert attempt.candidate_hash == step.candidate_hash == code_hash(result.best_source)
    assert attempt.measured_speedup == step.measured_speedup == pytest.approx(2.0)


def test_a_run_without_a_better_candidate_says_so_or_says_why(openai_server, client, kb):
    openai_server.push(reply(cuda("wrong")), reply(cuda("wrong")), reply(cuda("wrong")))
    openai_server.push(reply(json.dumps({"analyses": []})), reply(json.dumps({"updates": []})))
    result = run_loop(client, kb, RecordedHarness(), rollouts=1, depth=1)
    assert not result.improved and result.error is None
    assert result.message == "no verified candidate beat the original"
    assert msgspec.structs.replace(result, error="no GPU").message == "no GPU"


def test_unreachable_llm_stops_the_run_and_records_the_error(kb):
    from kernelblaster.agents.llm.client import LlmClient, LlmConfig

    client = LlmClient(
        LlmConfig(
            base_url="http://127.0.0.1:9",
            model="m",
            api_key_env="NOPE",
            timeout_s=0.5,
            max_retries=0,
        ),
        api_key="k",
    )
    outcome = run_loop(client, kb, RecordedHarness())
    assert not outcome.improved
    assert outcome.error is not None and "LLM" in outcome.error
    assert len(outcome.steps) == 1 and kb.attempts()[0].outcome == "infrastructure"


def test_cancelling_keeps_partial_results(openai_server, client, kb):
    harness = RecordedHarness()
    openai_server.push(reply(cuda("verified 0.5")), reply(soft(True)))
    calls = iter([False, True])
    outcome = run_loop(client, kb, harness, cancelled=lambda: next(calls, True))
    assert outcome.cancelled
    assert len(outcome.steps) == 1 and outcome.improved
    assert len(kb.attempts()) == 1


def test_the_original_must_verify_first(client, kb):
    class Broken(RecordedHarness):
        def __call__(self, source, text, kernel, settings, **options):
            return Evaluation(
                outcome="wrong_result", feedback=Feedback(kind="wrong_result", message="NaN")
            )

    outcome = run_loop(client, kb, Broken())
    assert not outcome.improved and "can't be optimized" in outcome.error
    assert kb.attempts() == []


def test_a_state_the_kb_lacks_is_mapped_by_the_state_extractor(openai_server, client, kb):
    class UnknownState(RecordedHarness):
        def __call__(self, source, text, kernel, settings, **options):
            evaluation = super().__call__(source, text, kernel, settings, **options)
            if evaluation.state is not None:
                # a stall-reason state the classifier can name and the catalog lacks
                # (compute.lsu was one until the catalog learned it)
                evaluation.state = msgspec.structs.replace(
                    evaluation.state, state="latency.mio_throttle"
                )
            return evaluation

    assert "latency.mio_throttle" not in {s.id for s in kb.states()}
    openai_server.push(
        reply(json.dumps({"state": "memory.l1", "confidence": 0.9, "rationale": "MIO-bound"})),
        reply(cuda("broken")),
        reply(cuda("broken")),
        reply(cuda("broken")),
    )
    outcome = run_loop(client, kb, UnknownState(), rollouts=1, depth=1)
    assert outcome.steps[0].state_before == "memory.l1"
    assert "classify the performance state" in openai_server.chat_requests[0].prompt_text
    (attempt,) = kb.attempts()
    assert attempt.before_state == "memory.l1" and attempt.outcome == "compile_error"


class SanitizerCannotRun(RecordedHarness):
    """The best candidate's sanitizer evaluation as the worker answers where compute-sanitizer
    cannot check it, for a reason not the candidate's (`why`): the check verified and timed
    the candidate, then the real sanitizer code met a compute_sanitizer_path naming no
    program ("missing") or a cache whose work folder can't be made ("no_folder"); or the
    worker died of a traceback in harness code while the tool ran ("worker_died", the
    FileNotFoundError of issue 42). Each goes through the loop's own reading of a worker
    response (evaluation_of)."""

    def __init__(self, tmp_path: Path, why: str):
        super().__init__()
        self.tmp_path, self.why = tmp_path, why

    def __call__(self, source, text, kernel, settings, **options):
        evaluation = super().__call__(source, text, kernel, settings, **options)
        if not options.get("sanitize"):
            return evaluation
        from kernelblaster.harness.check.sanitizer import sanitize_target
        from kernelblaster.harness.protocol.worker_failures import WorkerFailed, worker_error
        from kernelblaster.harness.target.targets import Target

        if self.why == "worker_died":
            failure = WorkerFailed(
                "the worker exited (exit 1) without a result",
                log="Traceback (most recent call last):\n  ...\nFileNotFoundError: [Errno 2] "
                "No such file or directory: '/root/.cache/kernelblaster/work/sanitize-x'",
                phase="sanitize",
                exit_status="exit 1",
            )
            return evaluation_of(WorkerResponse(error=worker_error(failure, settings)), None)
        (self.tmp_path / "blocker").write_text("a file where the cache should be")
        missing = self.tmp_path / "nowhere" / "compute-sanitizer"
        cache = self.tmp_path / ("blocker" if self.why == "no_folder" else "cache") / "kb"
        target = Target(
            kind="plain",
            source=str(SOFTMAX),
            entry="softmax",
            reference=str(SOFTMAX.with_suffix(".py")),
        )
        built = BuildResult(ok=True, source=str(SOFTMAX), artifact="/x/libsoftmax.so", arch="sm_90")
        tool = Settings(compute_sanitizer_path=str(missing), cache_dir=str(cache))
        _, run, error = sanitize_target(target, built, tool)
        assert evaluation.check is not None
        check = msgspec.structs.replace(evaluation.check, sanitizer=run)
        return evaluation_of(WorkerResponse(check=check, error=error), None)


@pytest.mark.parametrize("why", ["missing", "no_folder", "worker_died"])
def test_a_sanitizer_that_cannot_run_leaves_the_faster_candidate_offered_and_marked(
    openai_server, client, kb, tmp_path, why
):
    """Issue 42: compute-sanitizer could not check the 2.5x candidate for a reason of the
    machine or the harness. The candidate is still offered (improved, its speedup), marked
    "not checked for memory errors: <why> <fix>" in the result and its message; the KB
    records no rejection of the technique, only its success."""
    harness = SanitizerCannotRun(tmp_path, why)
    openai_server.push(reply(cuda("verified 0.4")), reply(soft(True)), *POLICY_UPDATE)
    outcome = run_loop(client, kb, harness, rollouts=1, depth=1)
    assert outcome.improved and outcome.speedup == pytest.approx(2.5)
    assert outcome.best_source is not None and "KB_RESULT_verified_0.4" in outcome.best_source
    assert outcome.sanitizer is not None and outcome.sanitizer.status == "not_run"
    expected = {
        "missing": ("compute-sanitizer could not be started", "compute_sanitizer_path"),
        "no_folder": (f"{tmp_path / 'blocker'} is a file, not a folder", "cache_dir"),
        "worker_died": ("died (exit 1) while compute-sanitizer checked", "profile_timeout_s"),
    }[why]
    assert expected[0] in outcome.sanitizer.reason and expected[1] in outcome.sanitizer.fix
    assert outcome.passed_over == [] and outcome.error is None
    assert outcome.message.startswith("2.50x faster")
    assert "; not checked for memory errors: " in outcome.message
    assert outcome.warning.startswith("not checked for memory errors: ")
    assert [a.outcome for a in kb.attempts()] == ["success"]
    # its final timing: the sanitizer run's check where it verified and timed the candidate
    assert (outcome.best_check is None) == (why == "worker_died")
