"""The KernelBench runner without a GPU: problem discovery, the report's arithmetic, what
counts as a degenerate reference, and whole runs (init → optimize with one shared KB → final
timing) against the scripted OpenAI-compatible HTTP server and a real SQLite KB, with the
harness's results recorded (real ncu states from the shared H200 fixtures) — resumable, with
every LLM call's tokens counted per problem. tests/agents/kernelbench/test_kernelbench_gpu.py and
bench/kernelbench_mechanics.py run the real harness on a GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from bench.openai_server import HttpError, Reply, reply, reply_by_agent
from kernelblaster.agents.kernelbench.metrics import fast_p, geomean, summarize
from kernelblaster.agents.kernelbench.problems import (
    ProblemsError,
    discover,
    is_problem,
    level_name,
)
from kernelblaster.agents.kernelbench.records import ProblemResult, RunConfig
from kernelblaster.agents.kernelbench.report import (
    MECHANICS_BANNER,
    load_runs,
    render_markdown,
    results_name,
    write_report,
)
from kernelblaster.agents.kernelbench.runner import (
    ResultsMismatch,
    RunAborted,
    RunServices,
    degenerate_reference,
    open_run,
    run_kernelbench,
)
from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.cli import main
from kernelblaster.harness.protocol.records import (
    CheckResult,
    HarnessError,
    SanitizerRun,
    VerifyResult,
    VerifyWarning,
)
from kernelblaster.harness.target.reference_signature import SignatureResponse
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings
from tests.agents.loop.test_loop import RecordedHarness, cuda, soft

REPO = Path(__file__).resolve().parents[3]
SOFTMAX_REFERENCE = (REPO / "examples" / "softmax.py").read_text()
SOFTMAX_KERNEL = (REPO / "examples" / "softmax.cu").read_text()
CONFIG = RunConfig(
    rollouts=1, depth=1, top_k=3, init_attempts=2, model="test-model", mechanics=True
)
DEVICE = "NVIDIA H100 80GB HBM3"


def write_problems(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(SOFTMAX_REFERENCE)
    return folder


# --- discovery ----------------------------------------------------------------------------


def test_problems_are_found_in_upstream_order_and_solutions_are_not_problems(tmp_path):
    level = write_problems(tmp_path / "level1", "10_Tenth", "2_Second", "1_First")
    (level / "2_Second_solution.py").write_text(
        SOFTMAX_REFERENCE + "\nclass ModelNew(Model):\n    pass\n"
    )
    (level / "helpers.py").write_text("def get_inputs():\n    return []\n")
    (level / "1_First.cu").write_text("// given\n")
    problems = discover([level])
    assert [p.name for p in problems] == ["1_First", "2_Second", "10_Tenth"]
    assert problems[0].start == level / "1_First.cu" and problems[1].start is None
    assert [p.name for p in discover([level], only=["10", "2_Second"])] == ["2_Second", "10_Tenth"]
    assert [p.name for p in discover([level], limit=1)] == ["1_First"]
    starts = write_problems(tmp_path / "starts")
    (starts / "10_Tenth.cu").write_text("// given elsewhere\n")
    assert discover([level], start_dir=starts)[2].start == starts / "10_Tenth.cu"
    assert level_name([level]) == "level1"
    assert not is_problem((level / "2_Second_solution.py").read_text())


def test_what_is_not_a_problem_is_said_clearly(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProblemsError, match="holds no KernelBench problem files"):
        discover([empty])
    with pytest.raises(ProblemsError, match="does not exist"):
        discover([tmp_path / "missing"])
    (tmp_path / "notes.py").write_text("x = 1\n")
    with pytest.raises(ProblemsError, match="is not a KernelBench problem file"):
        discover([tmp_path / "notes.py"])
    level = write_problems(tmp_path / "level2", "1_A")
    with pytest.raises(ProblemsError, match="no problem matches --only 7"):
        discover([level], only=["7"])
    with pytest.raises(ProblemsError, match="name the level"):
        level_name([level, empty])


# --- the numbers --------------------------------------------------------------------------


def result(name: str, status: str = "verified", speedup: float | None = None) -> ProblemResult:
    return ProblemResult(problem=name, file=f"{name}.py", status=status, speedup=speedup)


def test_geomean_fast_p_and_valid_rate_count_every_problem():
    results = [
        result("a", speedup=4.0),
        result("b", speedup=1.0),
        result("c", speedup=0.25),
        result("d", "init_failed"),
        result("e", "out_of_memory"),
        result("f", "degenerate_reference"),
    ]
    summary = summarize(results)
    assert summary.problems == 6 and summary.verified == 3
    assert summary.valid_rate == pytest.approx(0.5)
    assert summary.geomean_speedup == pytest.approx(1.0)  # (4 * 1 * 0.25) ** (1/3)
    assert summary.median_speedup == pytest.approx(1.0)
    # fast_p: valid and strictly faster than p, over all six problems
    assert summary.fast_p == {
        "0": 0.5,
        "1": pytest.approx(1 / 6),
        "1.5": pytest.approx(1 / 6),
        "2": pytest.approx(1 / 6),
    }
    assert summary.statuses == {
        "verified": 3,
        "init_failed": 1,
        "out_of_memory": 1,
        "degenerate_reference": 1,
    }
    assert fast_p(results, 0.2) == 0.5 and fast_p([], 1.0) == 0.0
    assert geomean([]) is None and geomean([2.0, 8.0]) == pytest.approx(4.0)
    empty = summarize([])
    assert empty.valid_rate == 0.0 and empty.geomean_speedup is None


def check_with(*warnings: VerifyWarning) -> CheckResult:
    verify = VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, warnings=list(warnings))
    return CheckResult(source="k.cu", target_kind="plain", verify=verify)


def weak(input_scale: float) -> VerifyWarning:
    return VerifyWarning(
        kind="weak_reference",
        message="the reference's output 0 is degenerate on get_inputs(): ...",
        evidence={
            "output": 0.0,
            "zero_fraction": 1.0,
            "constant_fraction": 1.0,
            "input_scale": input_scale,
        },
    )


def test_a_degenerate_reference_is_one_no_input_scale_made_informative():
    assert degenerate_reference(check_with(weak(0.0))) is not None
    assert degenerate_reference(check_with(weak(8.0))) is None  # verified on scaled inputs
    side = VerifyWarning(kind="side_stream", message="cudaStreamCreate in the source")
    assert degenerate_reference(check_with(side)) is None
    assert degenerate_reference(None) is None


# --- whole runs ---------------------------------------------------------------------------


class ProblemHarness(RecordedHarness):
    """RecordedHarness, per problem: `2_Big`'s inputs don't fit in GPU memory, `3_Flat`'s
    reference output is all zeros; the others are verified as RecordedHarness says (the first
    kernel at 1 ms against eager 0.8 ms and torch.compile 0.6 ms)."""

    def __call__(self, source, text, kernel, settings, **options) -> Evaluation:
        stem = Path(source).stem
        if stem == "2_Big":
            oom = HarnessError(
                kind="out_of_memory", message="The GPU ran out of memory while verifying.",
                fix="Use smaller inputs.",
            )  # fmt: skip
            return Evaluation(outcome="error", error=oom)
        evaluation = super().__call__(source, text, kernel, settings, **options)
        if stem == "3_Flat" and evaluation.check is not None:
            evaluation.check.verify.warnings.append(weak(0.0))
        return evaluation


class Endpoint:
    """The scripted server's answers: the first kernel for init, a rewrite measured at 0.25 ms
    for lowering, acceptance for the other agents; `down` answers 401 to everything."""

    def __init__(self):
        self.down = False
        self.answered = 0
        self._by_agent = reply_by_agent(
            {
                "init": reply(f"```cuda\n{SOFTMAX_KERNEL}```"),
                "lowering": reply(cuda("verified 0.25")),
                "soft_verify": reply(soft(True)),
                "perf_gap": reply(json.dumps({"analyses": []})),
                "parameter_update": reply(json.dumps({"updates": []})),
            }
        )

    def __call__(self, request):
        if self.down:
            return HttpError(401, "key revoked")
        answer = self._by_agent(request)
        self.answered += isinstance(answer, Reply)
        return answer


@pytest.fixture
def endpoint(openai_server) -> Endpoint:
    endpoint = Endpoint()
    openai_server.responder = endpoint
    return endpoint


def run_level(
    folder: Path, tmp_path: Path, client, *, lines: list[str] | None = None, harness=None
):
    results = tmp_path / "results" / results_name(DEVICE, "level1")
    run = open_run(results, device=DEVICE, level="level1", config=CONFIG, note="", restart=False)
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        services = RunServices(
            settings=Settings(cache_dir=str(tmp_path / "cache")),
            client=client,
            kb=kb,
            work_dir=tmp_path / "work",
            evaluate_fn=harness or ProblemHarness(),
            signature_fn=lambda reference, **_: SignatureResponse(),
            baselines_fn=None,  # the scripted checks carry their own
        )
        return run_kernelbench(
            discover([folder]), run, results_path=results, services=services,
            on_line=(lines if lines is not None else []).append,
        ), results  # fmt: skip


def test_a_run_records_every_problem_and_a_rerun_skips_them(
    openai_server, endpoint, make_client, tmp_path
):
    folder = write_problems(tmp_path / "level1", "1_Softmax", "2_Big", "3_Flat")
    client = make_client(timeout_s=10.0)
    lines: list[str] = []
    run, results = run_level(folder, tmp_path, client, lines=lines)

    saved = load_runs([results])[0]
    assert saved == run and saved.device == DEVICE and saved.config.mechanics
    by_name = {r.problem: r for r in saved.problems}
    solved = by_name["1_Softmax"]
    assert solved.status == "verified" and solved.started_from == "init"
    assert solved.init_replies == 1 and solved.kernel == "softmax_rowthread"
    assert solved.initial_ms == 1.0 and solved.final_ms == 0.25
    assert (solved.eager_ms, solved.compile_ms, solved.baseline) == (0.8, 0.6, "torch.compile")
    assert solved.speedup == pytest.approx(2.4)  # the faster baseline, 0.6 ms, over 0.25 ms
    assert solved.initial_speedup == pytest.approx(0.6)
    assert solved.optimize_speedup == pytest.approx(4.0)
    assert solved.steps == 1 and len(solved.techniques) == 1
    best = Path(solved.kernel_file)
    assert best.name == "1_Softmax.optimized.cu" and "KB_RESULT_verified_0.25" in best.read_text()
    assert (best.parent / "1_Softmax.cu").read_text() == SOFTMAX_KERNEL
    assert not (folder / "1_Softmax.cu").exists()  # the problems' folder is never written to

    big = by_name["2_Big"]
    assert big.status == "out_of_memory" and "ran out of memory" in big.detail
    assert (big.prompt_tokens, big.completion_tokens) == (100, 50)  # its one init reply
    flat = by_name["3_Flat"]
    assert flat.status == "degenerate_reference" and "degenerate" in flat.detail
    assert flat.steps == 0 and flat.final_ms == 1.0  # timed, but never optimized nor passed

    # Every reply the server gave is counted in the problem it was given for.
    assert sum(r.prompt_tokens for r in saved.problems) == 100 * endpoint.answered
    assert solved.tokens_by_purpose["init"] == 150 and solved.tokens_by_purpose["lowering"] == 150
    summary = saved.summary
    assert summary.problems == 3 and summary.verified == 1
    assert summary.valid_rate == pytest.approx(1 / 3)
    assert summary.geomean_speedup == pytest.approx(2.4)
    assert summary.fast_p["2"] == pytest.approx(1 / 3)
    assert lines[0] == "[1/3] level1/1_Softmax: init..."
    assert lines[1].startswith("[1/3] level1/1_Softmax: verified, 2.40x vs torch.compile")
    assert lines[3].startswith("[2/3] level1/2_Big: out_of_memory: The GPU ran out of memory")

    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:  # the run's one shared KB
        assert [a.kernel for a in kb.attempts()] == ["softmax_rowthread"]

    requests = len(openai_server.chat_requests)
    again: list[str] = []
    rerun, _ = run_level(folder, tmp_path, client, lines=again)
    assert len(openai_server.chat_requests) == requests  # nothing asked again
    assert rerun.problems == saved.problems
    assert again == [
        "[1/3] level1/1_Softmax: finished in an earlier run (verified)",
        "[2/3] level1/2_Big: finished in an earlier run (out_of_memory)",
        "[3/3] level1/3_Flat: finished in an earlier run (degenerate_reference)",
    ]


def test_a_dead_endpoint_stops_the_run_and_the_rerun_goes_on_from_there(
    openai_server, endpoint, make_client, tmp_path
):
    folder = write_problems(tmp_path / "level1", "1_Softmax", "4_Softmax")
    client = make_client(timeout_s=10.0)
    done = write_problems(tmp_path / "first", "1_Softmax")
    run_level(done, tmp_path, client)  # problem 1 finishes
    endpoint.down = True
    with pytest.raises(RunAborted, match="rejected the API key"):
        run_level(folder, tmp_path, client)
    results = tmp_path / "results" / results_name(DEVICE, "level1")
    assert [r.problem for r in load_runs([results])[0].problems] == ["1_Softmax"]
    endpoint.down = False
    run, _ = run_level(folder, tmp_path, client)
    assert [(r.problem, r.status) for r in run.problems] == [
        ("1_Softmax", "verified"),
        ("4_Softmax", "verified"),
    ]


def test_a_given_kernel_replaces_init(openai_server, endpoint, make_client, tmp_path):
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    (folder / "1_Softmax.cu").write_text(SOFTMAX_KERNEL)
    harness = ProblemHarness()
    run, _ = run_level(folder, tmp_path, make_client(timeout_s=10.0), harness=harness)
    solved = run.problems[0]
    assert solved.status == "verified" and solved.started_from == "given"
    assert solved.init_replies == 0 and "init" not in solved.tokens_by_purpose
    # The given kernel is evaluated once, profiled in full: the loop starts from that evaluation
    originals = [options for verdict, options in harness.calls if verdict == "original"]
    assert originals == [{"depth": "full"}]
    # Where the problem's time went: its rollouts and each step's phases
    assert solved.steps == len(solved.step_phases) > 0
    assert solved.rollouts_wall_s > 0 and solved.optimize_phases is not None
    # ... and the rest of it: the given kernel's check (the call's wall seconds), the loop's
    # wall time, each step's verdict
    assert solved.first_phases is not None and solved.first_phases.evaluation > 0
    assert solved.rollouts_wall_s <= solved.optimize_wall_s <= solved.wall_s
    assert solved.step_outcomes[0] == "success" and len(solved.step_outcomes) == solved.steps
    assert solved.step_speedups[0] == pytest.approx(4.0)  # 1 ms to 0.25 ms


def test_a_problem_the_loop_did_not_improve_keeps_its_first_check_as_final_timing(
    openai_server, endpoint, make_client, tmp_path
):
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    (folder / "1_Softmax.cu").write_text(SOFTMAX_KERNEL)

    class SlowerCandidates(ProblemHarness):  # every rewrite verifies, slower than the first
        def __call__(self, source, text, kernel, settings, **options):
            slower = text.replace("KB_RESULT_verified_0.25", "KB_RESULT_verified_1.5")
            return super().__call__(source, slower, kernel, settings, **options)

    harness = SlowerCandidates()
    run, _ = run_level(folder, tmp_path, make_client(timeout_s=10.0), harness=harness)
    solved = run.problems[0]
    assert solved.status == "verified" and not solved.techniques
    assert solved.final_ms == solved.initial_ms == 1.0
    assert [verdict for verdict, _ in harness.calls].count("original") == 1


def test_an_improved_problem_is_timed_finally_in_its_sanitizer_run_not_checked_again(
    openai_server, endpoint, make_client, tmp_path
):
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    (folder / "1_Softmax.cu").write_text(SOFTMAX_KERNEL)

    class SanitizerTimes(ProblemHarness):  # the sanitizer run's check says 0.3 ms
        def __call__(self, source, text, kernel, settings, **options):
            if options.get("sanitize"):
                text = text.replace("KB_RESULT_verified_0.25", "KB_RESULT_verified_0.3")
            return super().__call__(source, text, kernel, settings, **options)

    harness = SanitizerTimes()
    run, _ = run_level(folder, tmp_path, make_client(timeout_s=10.0), harness=harness)
    solved = run.problems[0]
    assert solved.status == "verified" and solved.techniques
    # the best's final timing is its sanitizer run's (with that run's baselines), and the
    # best was evaluated once after the rollouts: that run
    assert solved.final_ms == 0.3 and solved.optimize_speedup == pytest.approx(1 / 0.3)
    assert (solved.eager_ms, solved.compile_ms) == (0.8, 0.6)
    after_rollouts = [options for _, options in harness.calls if not options.get("ncu_below_ms")]
    assert after_rollouts[-1] == {"sanitize": True, "profile": False}
    assert {"profile": False} not in [options for _, options in harness.calls]


@pytest.mark.parametrize("checked", [True, False])
def test_a_best_the_sanitizer_could_not_check_keeps_its_gain_and_says_so(
    openai_server, endpoint, make_client, tmp_path, checked
):
    """Issue 42's bench: compute-sanitizer could not check the 4x rewrite (a reason of the
    machine). The problem keeps optimize's gain, and its line and the report say the kernel
    was not checked for memory errors, why and the fix. Its final timing is the sanitizer
    run's check where that verified and timed it (`checked`), else its step's, over the first
    check's baselines."""
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    (folder / "1_Softmax.cu").write_text(SOFTMAX_KERNEL)
    not_run = SanitizerRun(
        status="not_run",
        reason="compute-sanitizer could not be started (compute-sanitizer: No such file).",
        fix="Install the CUDA toolkit's compute-sanitizer.",
    )

    class NoSanitizer(ProblemHarness):
        def __call__(self, source, text, kernel, settings, **options):
            evaluation = super().__call__(source, text, kernel, settings, **options)
            if not options.get("sanitize"):
                return evaluation
            error = HarnessError(kind="sanitizer_missing", message=not_run.reason, fix=not_run.fix)
            assert evaluation.check is not None
            check = msgspec.structs.replace(evaluation.check, sanitizer=not_run)
            return Evaluation(outcome="error", error=error, check=check if checked else None)

    lines: list[str] = []
    run, results = run_level(
        folder, tmp_path, make_client(timeout_s=10.0), lines=lines, harness=NoSanitizer()
    )
    solved = run.problems[0]
    assert solved.status == "verified" and solved.techniques
    assert solved.final_ms == 0.25 and solved.optimize_speedup == pytest.approx(4.0)
    assert (solved.eager_ms, solved.compile_ms) == (0.8, 0.6)
    assert solved.sanitizer == not_run and solved.passed_over == []
    assert lines[-1].endswith(f"; {not_run.summary}")
    report = results.parent / "kernelbench-nvidia-h100-80gb-hbm3.md"
    write_report([results], results.parent)
    assert f"| not checked: {not_run.reason} |" in report.read_text()


def test_continuing_with_other_options_is_refused(tmp_path):
    path = tmp_path / "kernelbench-gpu-level1.json"
    run = open_run(path, device=DEVICE, level="level1", config=CONFIG, note="", restart=False)
    path.write_bytes(msgspec.json.encode(run))
    other = msgspec.structs.replace(CONFIG, rollouts=4)
    with pytest.raises(ResultsMismatch, match="pass --restart to start over"):
        open_run(path, device=DEVICE, level="level1", config=other, note="", restart=False)
    fresh = open_run(path, device=DEVICE, level="level1", config=other, note="", restart=True)
    assert fresh.problems == [] and fresh.config == other


# --- the report ---------------------------------------------------------------------------


def test_the_report_labels_a_mechanics_run_and_sets_it_beside_the_paper(
    openai_server, endpoint, make_client, tmp_path
):
    pytest.importorskip("matplotlib", reason="draws the plot: pip install -e '.[dev]'")
    folder = write_problems(tmp_path / "level1", "1_Softmax", "2_Big")
    _, results = run_level(folder, tmp_path, make_client(timeout_s=10.0))
    report = write_report([results], results.parent)
    assert report.name == "kernelbench-nvidia-h100-80gb-hbm3.md"
    text = report.read_text()
    assert MECHANICS_BANNER in text
    assert "| level1 (mechanics) | 2 | 50% | 2.40x | 2.40x | 50% | 50% | 50% | 50% |" in text
    assert "1.497x, 86% valid" in text  # the paper's level-1 anchor
    assert "| 1_Softmax | verified | init (1) | 0.60x | 2.40x torch.compile | 4.00x |" in text
    assert "| 2_Big | out_of_memory |" in text
    plot = results.parent / "kernelbench-nvidia-h100-80gb-hbm3.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({plot.name})" in text


def test_a_report_without_matplotlib_says_how_to_draw_the_plot():
    text = render_markdown([], None, "The plot was not drawn here: matplotlib is not installed.")
    assert "matplotlib is not installed" in text and "![" not in text


def test_report_command_and_the_run_command_without_a_gpu(tmp_path, capsys, monkeypatch):
    assert main(["bench", "report", "--results", str(tmp_path)]) == 2
    assert "no kernelbench-*.json" in capsys.readouterr().err
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no nvidia-smi: no GPU to run on
    monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    code = main(["bench", "kernelbench", str(folder), "--results", str(tmp_path / "r")])
    assert code == 2
    assert "KernelBench needs a GPU: no GPU found" in capsys.readouterr().err


@pytest.mark.nvcc
def test_the_run_command_stops_where_no_kernel_can_run_and_records_nothing(
    openai_server, endpoint, tmp_path, capsys, monkeypatch
):
    """The whole command, through the real worker, on this machine whose torch is a CPU build.
    An nvidia-smi on PATH that names a GPU stands in for the device query only, so the run
    gets as far as verifying the first kernel: the worker's verdict stops the run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 9.0"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("KERNELBLASTER_LLM_MODEL", "test-model")
    monkeypatch.setenv("KERNELBLASTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELBLASTER_KB", str(tmp_path / "kb.sqlite3"))
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    results = tmp_path / "results"
    code = main(["bench", "kernelbench", str(folder), "--results", str(results)])
    captured = capsys.readouterr()
    assert code == 1
    assert "KernelBench level1: 1 problem(s) on NVIDIA H100 80GB HBM3 with test-model" in (
        captured.out
    )
    assert "stopped: This machine has no NVIDIA GPU driver" in captured.err
    assert len(openai_server.chat_requests) == 1  # the init reply, built, then not verifiable
    assert not results.exists()  # the problem stays unfinished, for the rerun
