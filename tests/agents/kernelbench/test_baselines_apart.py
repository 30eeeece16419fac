"""The PyTorch baselines measured apart from a problem's checks (agents/kernelbench/baselines.py):
a real harness worker (task "baselines", the CPU standing in for the GPU:
tests/harness/cpu_worker.py) compiles torch.compile's code while the "GPU" is held by other
evaluations, then waits for its turn at the GPU's gate and times the baselines, never while
another evaluation holds it. What is asserted is the intervals each side records
(PhaseTimes.spans), never a duration. torch.compile runs for real on the CPU (~10 s per test on
2 cores)."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from bench.openai_server import reply, reply_by_agent
from kernelblaster.agents.kernelbench.baselines import BaselinesJob
from kernelblaster.agents.kernelbench.problems import discover
from kernelblaster.agents.kernelbench.records import RunConfig
from kernelblaster.agents.kernelbench.runner import RunServices, open_run, run_kernelbench
from kernelblaster.agents.loop.gpu_gates import GpuGates
from kernelblaster.harness.check.baselines import compile_ahead, measure_baselines
from kernelblaster.harness.check.timing import timing_input_sets
from kernelblaster.harness.protocol.optimize_protocol import Span
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.reference_signature import SignatureResponse
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings
from tests.agents.kernelbench.test_kernelbench import SOFTMAX_KERNEL, ProblemHarness, write_problems
from tests.agents.loop.test_llm_overlap import _overlap
from tests.agents.loop.test_loop import cuda, soft

TESTS = Path(__file__).resolve().parents[2]
CPU_WORKER = TESTS / "harness" / "cpu_worker.py"
RELU = TESTS / "fixtures" / "targets" / "relu_ref.py"
HOLD_S = 0.3  # a stand-in evaluation's hold of the GPU


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        cache_dir=str(tmp_path / "cache"),
        worker_command=[sys.executable, str(CPU_WORKER), str(tmp_path)],
    )


def test_compiled_ahead_the_measurements_torch_compile_finds_its_graph_compiled(tmp_path):
    """In one process, as in the clean reference process: the compilation ahead fills
    Inductor's FX graph cache, and the measurement's torch.compile takes its graph from it."""
    from torch._dynamo.utils import counters

    cpu = torch.device("cpu")
    compile_ahead(load_reference(RELU, cpu), 7, cpu)
    hits = counters["inductor"]["fxgraph_cache_hit"]
    reference = load_reference(RELU, cpu)
    measured = measure_baselines(reference, timing_input_sets(reference, [7], cpu), cpu, tmp_path)
    assert measured.compiled is not None and measured.compile_error is None
    assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1


def test_the_baselines_compile_while_the_gpu_is_held_and_are_timed_between_two_holds(tmp_path):
    gates = GpuGates()
    job = BaselinesJob(RELU, RELU.with_suffix(".cu"), _settings(tmp_path), gates)
    held: list[Span] = []

    def evaluations() -> None:  # the rollouts' candidates, one after another on GPU 0
        while not done.is_set():
            with gates.turn(0) as start:
                time.sleep(HOLD_S)
                held.append(Span(kind="gpu", start=start, end=time.time(), gpu=0))
            time.sleep(0.02)  # the step's bookkeeping before its next evaluation

    done = threading.Event()
    thread = threading.Thread(target=evaluations)
    thread.start()
    try:
        measured, error = job.join()
    finally:
        done.set()
        thread.join()
    assert error is None, error
    assert measured is not None and measured.eager is not None and measured.compiled is not None
    (compiling,) = [span for span in job.phases.spans if span.kind == "cpu"]
    (timing,) = [span for span in job.phases.spans if span.kind == "gpu"]
    assert compiling.end <= timing.start
    assert any(_overlap(compiling, span) for span in held), "compiled while the GPU was held"
    assert not any(_overlap(timing, span) for span in held), "timed beside an evaluation"
    assert any(span.end <= timing.start for span in held)  # it waited for a hold to end
    parts = job.phases.parts
    for part in ("baselines_compile_ahead", "baselines_gpu_wait", "baselines_compile"):
        assert part in parts, parts
    assert "baselines_joined_wait" in parts and job.phases.baselines > 0


class HoldingHarness(ProblemHarness):
    """ProblemHarness holding its GPU for a second per evaluation (so that the rollouts last
    about as long as the compilation); notes each call's options."""

    def __call__(self, source, text, kernel, settings, **options):
        time.sleep(1.0)
        return super().__call__(source, text, kernel, settings, **options)


def _faster_each_time():
    """The lowering agent's candidates, each verified a little faster than the one before."""
    numbers = itertools.count(1)
    return reply_by_agent(
        {
            "lowering": lambda _: reply(cuda(f"verified {0.5 - 0.01 * next(numbers):.2f}")),
            "soft_verify": reply(soft(True)),
            "perf_gap": reply(json.dumps({"analyses": []})),
            "parameter_update": reply(json.dumps({"updates": []})),
            "init": reply(f"```cuda\n{SOFTMAX_KERNEL}```"),
        }
    )


def _gpu_spans(*phases) -> list[Span]:
    return [span for p in phases if p is not None for span in p.spans if span.kind == "gpu"]


def test_a_problems_baselines_overlap_its_rollouts_and_join_its_record(
    openai_server, make_client, tmp_path
):
    openai_server.responder = _faster_each_time()
    folder = write_problems(tmp_path / "level1", "1_Softmax")
    config = RunConfig(
        rollouts=2, depth=3, top_k=3, init_attempts=2, model="test-model", mechanics=True
    )
    results = tmp_path / "results.json"
    run = open_run(results, device="cpu", level="level1", config=config, note="", restart=False)
    harness = HoldingHarness()
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        services = RunServices(
            settings=_settings(tmp_path),
            client=make_client(timeout_s=10.0),
            kb=kb,
            work_dir=tmp_path / "work",
            evaluate_fn=harness,
            signature_fn=lambda reference, **_: SignatureResponse(),
            baselines_fn=BaselinesJob,
        )
        run = run_kernelbench(discover([folder]), run, results_path=results, services=services)
    (solved,) = run.problems
    assert solved.status == "verified", solved.detail
    # No check measured baselines: the job did, once
    assert harness.calls and all(options["baselines"] is False for _, options in harness.calls)
    measured = solved.baselines_phases
    assert measured is not None
    (compiling,) = [span for span in measured.spans if span.kind == "cpu"]
    (timing,) = [span for span in measured.spans if span.kind == "gpu"]
    checks = _gpu_spans(solved.first_phases, solved.optimize_phases, *solved.step_phases)
    # the first kernel's check, the six candidates', the sanitizer run's
    assert len(checks) == 1 + 6 + 1
    assert any(_overlap(compiling, span) for span in checks), "compiled beside the checks"
    assert not any(_overlap(timing, span) for span in checks), "timed beside a check"
    # The record's baselines are the job's measurement (the CPU's), not the scripted checks'
    # 0.8 / 0.6 ms, and its speedups are taken over them, as before
    assert solved.eager_ms is not None and solved.compile_ms is not None
    assert (solved.eager_ms, solved.compile_ms) != (0.8, 0.6)
    final = solved.final_ms
    assert final is not None and final < 0.5 and solved.initial_ms == 1.0
    fastest = min(solved.eager_ms, solved.compile_ms)
    assert solved.speedup == pytest.approx(fastest / final)
    assert solved.speedup_vs_eager == pytest.approx(solved.eager_ms / final)
    assert solved.speedup_vs_compile == pytest.approx(solved.compile_ms / final)
    assert solved.initial_speedup == pytest.approx(fastest / 1.0)
    assert solved.optimize_speedup == pytest.approx(1.0 / final)
