"""Rollouts on one GPU (or a few) run at once: their LLM calls overlap, only their candidates'
evaluations queue, one at a time per GPU (agents/loop/gpu_gates.py). Against the scripted
OpenAI-compatible server answering every call after a fixed delay, with a harness that holds
its "GPU" for a while per candidate; what is asserted is the intervals each step records
(OptimizeStep.phases.spans), never a wall time. Also: the phases every step and run record,
where a candidate gets ncu's pass (WorkerRequest.ncu_below_ms), and how the worker's phase
seconds are read."""

from __future__ import annotations

import itertools
import json
import time

import msgspec
import pytest

from bench.openai_server import reply, reply_by_agent
from kernelblaster.agents.loop.evaluation import harness_phases
from kernelblaster.agents.loop.rollout_runners import on_gpus, runner_for
from kernelblaster.harness.protocol.optimize_protocol import OptimizeResult, PhaseTimes, Span
from kernelblaster.harness.protocol.records import BuildResult, CheckResult, ProfileReport
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.settings import Settings
from tests.agents.loop.test_loop import RecordedHarness, cuda, run_loop, soft

LLM_DELAY_S = 0.5
GPU_HOLD_S = 0.15


class SlowHarness(RecordedHarness):
    """RecordedHarness that holds the GPU for GPU_HOLD_S per evaluation, and notes the options
    each candidate was evaluated with."""

    def __call__(self, source, text, kernel, settings, **options):
        time.sleep(GPU_HOLD_S)
        return super().__call__(source, text, kernel, settings, **options)


def _delayed_replies():
    """Every agent answers after LLM_DELAY_S; the lowering agent with a new verified candidate
    each time, each a little faster (one identical to its step's start would go unchecked)."""
    numbers = itertools.count(1)
    return reply_by_agent(
        {
            "lowering": lambda _request: reply(
                cuda(f"verified {0.5 - 0.01 * next(numbers):.2f}"), delay_s=LLM_DELAY_S
            ),
            "soft_verify": reply(soft(True), delay_s=LLM_DELAY_S),
            "perf_gap": reply(json.dumps({"analyses": []})),
            "parameter_update": reply(json.dumps({"updates": []})),
        }
    )


def _spans(result: OptimizeResult, kind: str) -> list[tuple[int, Span]]:
    """(rollout, span) of every step's spans of `kind`; the run's own as rollout -1."""
    found = [(-1, span) for span in result.phases.spans if span.kind == kind]
    for step in result.steps:
        found += [(step.rollout, span) for span in step.phases.spans if span.kind == kind]
    return found


def _overlap(a: Span, b: Span) -> bool:
    return a.start < b.end and b.start < a.end


@pytest.fixture
def slow_client(make_client):
    return make_client(timeout_s=5.0)


def test_rollouts_on_one_gpu_overlap_their_llm_calls_and_queue_their_evaluations(
    openai_server, slow_client, kb
):
    openai_server.responder = _delayed_replies()
    result = run_loop(
        slow_client, kb, SlowHarness(), rollouts=4, depth=2, run_rollouts=runner_for(Settings())
    )
    assert result.error is None and len(result.steps) == 8

    llm = _spans(result, "llm")
    pairs = [(a, b) for (ra, a), (rb, b) in itertools.combinations(llm, 2) if ra != rb]
    overlapping = [(a, b) for a, b in pairs if _overlap(a, b)]
    # Every rollout's first lowering call went out at once: all four wait together
    assert len(overlapping) >= 6

    gpu = [span for _, span in _spans(result, "gpu")]
    assert {span.gpu for span in gpu} == {0}
    assert len(gpu) == 1 + 8 + 1  # the original, each step's candidate, the sanitizer run
    for a, b in itertools.combinations(gpu, 2):
        assert not _overlap(a, b), "two evaluations held GPU 0 at once"

    for step in result.steps:
        phases = step.phases
        assert phases.llm_wait >= LLM_DELAY_S * 0.9
        assert phases.soft_verify >= LLM_DELAY_S * 0.9
        assert phases.evaluation >= GPU_HOLD_S * 0.9
        assert phases.kb_write > 0
        assert [s.kind for s in phases.spans].count("gpu") == 1
    # The evaluations queued: some step waited for another rollout's candidate
    assert max(step.phases.gpu_queue for step in result.steps) >= GPU_HOLD_S * 0.5
    # The run's own work: the original's evaluation and the sanitizer run; its wall holds all
    assert result.phases.evaluation >= 2 * GPU_HOLD_S * 0.9
    assert result.wall_s >= result.rollouts_wall_s > 0


def test_rollouts_on_two_gpus_evaluate_at_once_one_candidate_per_gpu(
    openai_server, slow_client, kb
):
    openai_server.responder = _delayed_replies()
    result = run_loop(
        slow_client, kb, SlowHarness(), rollouts=4, depth=2, run_rollouts=on_gpus([0, 1])
    )
    assert result.error is None and len(result.steps) == 8
    by_gpu: dict[int, list[Span]] = {}
    for rollout, span in _spans(result, "gpu"):
        if rollout >= 0:
            assert span.gpu == rollout % 2  # a rollout's steps are all timed on one GPU
        by_gpu.setdefault(span.gpu, []).append(span)
    assert set(by_gpu) == {0, 1}
    for spans in by_gpu.values():
        for a, b in itertools.combinations(spans, 2):
            assert not _overlap(a, b)
    assert any(_overlap(a, b) for a in by_gpu[0] for b in by_gpu[1])


def test_a_candidate_gets_ncu_only_where_the_rollout_builds_on_it(openai_server, client, kb):
    """ncu's pass follows the in-process state only for a candidate faster than where its step
    started (by the loop's MIN_SPEEDUP) with depth left; at the last step, never."""
    openai_server.responder = _delayed_replies()
    harness = RecordedHarness()
    run_loop(client, kb, harness, rollouts=1, depth=2)
    candidates = [options for verdict, options in harness.calls if verdict == "verified"]
    assert [options.get("ncu_below_ms") for options in candidates if "sanitize" not in options] == [
        pytest.approx(1.0 / 1.02),  # step 1, from the original's 1.0 ms
        0.0,  # step 2: nothing follows it
    ]


def test_the_workers_phase_seconds_are_read_by_phase():
    def response(**seconds: float) -> WorkerResponse:
        check = CheckResult(source="k.cu", target_kind="plain", phase_seconds=seconds)
        built = BuildResult(ok=True, source="k.cu", arch="sm_90", seconds=0.7)
        return WorkerResponse(build=built, check=check)

    beside_build = harness_phases(
        response(
            reference_load=0.5,
            reference_after_build=0.1,
            load=0.05,
            verify=0.3,
            time=0.9,
            profile_counters=0.6,
            baselines=0.01,
        )
    )
    assert (beside_build.build, beside_build.reference, beside_build.verify) == (0.7, 0.1, 0.35)
    assert (beside_build.timing, beside_build.quick_profile, beside_build.full_profile) == (
        0.9,
        0.6,
        0.0,
    )
    ahead = harness_phases(response(ahead_reference_load=2.0, reference_wait=0.2, load=0.05))
    assert (ahead.reference, ahead.verify) == (0.2, 0.05)
    in_check = harness_phases(
        response(reference_load=0.4, reference_probe=0.1, load=0.6, verify=0.3, profile_ncu=9.0)
    )
    assert (in_check.reference, in_check.full_profile) == (0.5, 9.0)
    assert in_check.verify == pytest.approx(0.4)


def test_the_finer_seconds_of_the_check_and_of_ncu_are_kept_and_summed_as_parts():
    check = CheckResult(
        source="k.cu",
        target_kind="plain",
        phase_seconds={"spare_age": 30.0, "verify_setup": 0.2, "profile_ncu": 5.0},
    )
    built = BuildResult(ok=True, source="k.cu", arch="sm_90", seconds=0.7)
    ncu = ProfileReport(
        device="H100",
        arch="sm_90",
        depth="quick",
        program="native_driver",
        phase_seconds={"ncu_prepare": 0.5, "ncu_to_first_kernel": 1.5, "ncu_kernels": 2.0},
    )
    counters = msgspec.structs.replace(ncu, program="in_process", phase_seconds={"replay": 0.3})
    with_ncu = harness_phases(WorkerResponse(build=built, check=check, profile=ncu))
    # a spare's age is no time spent in the run; the in-process profile's replay is inside
    # quick_profile already, and not ncu's
    assert with_ncu.parts == {
        "verify_setup": 0.2,
        "profile_ncu": 5.0,
        "ncu_prepare": 0.5,
        "ncu_to_first_kernel": 1.5,
        "ncu_kernels": 2.0,
    }
    assert harness_phases(WorkerResponse(build=built, check=check, profile=counters)).parts == {
        "verify_setup": 0.2,
        "profile_ncu": 5.0,
    }
    step = PhaseTimes()
    step.add(with_ncu)
    step.add(with_ncu)
    assert step.parts["ncu_kernels"] == 4.0 and step.full_profile == 10.0


def _held_spans(slots: int) -> list[Span]:
    """Four threads evaluating on GPU 0 through one GatedEvaluate of `slots`."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelblaster.agents.loop.evaluation import Evaluation
    from kernelblaster.agents.loop.gpu_gates import GatedEvaluate

    def hold(*_args, **_options) -> Evaluation:
        time.sleep(GPU_HOLD_S)
        return Evaluation(outcome="verified")

    gated = GatedEvaluate(hold, slots=slots)
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda _: gated("k.cu", "", None, Settings()), range(4)))
    return [span for evaluation in done for span in evaluation.phases.spans]


def test_parallel_gpu_jobs_lets_that_many_evaluations_share_a_gpu():
    def most_at_once(spans: list[Span]) -> int:  # held at the moment one began
        return max(sum(s.start <= a.start < s.end for s in spans) for a in spans)

    assert most_at_once(_held_spans(1)) == 1
    assert most_at_once(_held_spans(2)) == 2


def test_gates_travel_by_value_with_locks_of_their_own():
    import pickle

    from kernelblaster.agents.loop.gpu_gates import GatedEvaluate

    gated = GatedEvaluate(print, slots=2)
    with gated.gates.turn(0), gated.gates.turn(0):  # both held here: a copy shares neither
        copy = pickle.loads(pickle.dumps(gated))
        assert copy.gates.slots == 2 and copy.evaluate is print
        with copy.gates.turn(0), copy.gates.turn(0):
            pass
