"""The optimization loop with spare workers (`keep_spare_workers`, as `kernelblaster optimize`
runs it): its real `evaluate` sends every candidate to a worker process that was already
running when the evaluation began, on the rollout's own GPU; every rollout GPU's first worker
was started while the original was profiled; and whether the run ends normally, is cancelled
or dies of an exception, no worker is left. The workers are real processes speaking the worker
protocol (tests/logging_worker.py), answering with a real H200 profile of the original."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import msgspec
import psutil
import pytest

from kernelblaster.agents.loop.evaluation import evaluate
from kernelblaster.agents.loop.rollout_runners import runner_for
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.optimize_protocol import OptimizeResult
from kernelblaster.harness.protocol.records import BuildResult, CheckResult, VerifyResult
from kernelblaster.harness.protocol.worker_client import keep_spare_workers
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.settings import Settings
from tests.agents.loop.rollout_harness import by_prompt
from tests.agents.loop.test_loop import H200, SOFTMAX, run_loop, timing
from tests.logging_worker import events
from tests.process_leaks import leftovers, none_left

TESTS = Path(__file__).resolve().parents[2]
GPUS = [0, 1]


def _verified_answer(path: Path) -> Path:
    """A worker response for any candidate: verified, timed (the logging worker sets the time
    from the candidate's KB_RESULT line) and profiled (the original's measured profile)."""
    report = read_report(H200)
    profile = msgspec.structs.replace(
        report, kernels=[k for k in report.kernels if k.name == "softmax_rowthread"]
    )
    response = WorkerResponse(
        build=BuildResult(ok=True, source=str(SOFTMAX), arch="sm_90"),
        check=CheckResult(
            source=str(SOFTMAX),
            target_kind="plain",
            timing=timing(1.0),
            verify=VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, message="matches"),
        ),
        profile=profile,
        states=classify_report(profile),
    )
    path.write_bytes(msgspec.json.encode(response))
    return path


class WatchedEvaluate:
    """The real `evaluate`, noting before each call the worker processes already running, with
    the GPU each was started for (KERNELBLASTER_PREWARM)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.calls: list[tuple[int, dict[int, int]]] = []  # (the call's GPU, {pid: GPU})
        self._lock = threading.Lock()

    def __call__(self, source, text, kernel, settings, **options):
        alive = _workers(self.folder)
        with self._lock:
            self.calls.append((settings.gpu, alive))
        return evaluate(source, text, kernel, settings, **options)


def _workers(folder: Path) -> dict[int, int]:
    found = {}
    for process in leftovers(folder):
        try:
            found[process.pid] = int(process.environ()["KERNELBLASTER_PREWARM"])
        except psutil.NoSuchProcess:  # ended between the listing and this look
            continue
    return found


def _optimize(tmp_path, client, kb, harness=evaluate, **run_options) -> OptimizeResult:
    """Three one-step rollouts on GPUs 0 and 1, inside `keep_spare_workers` as `optimize` runs
    them, with the logging worker answering every evaluation (`harness`: the real `evaluate`)."""
    worker = [sys.executable, str(TESTS / "logging_worker.py"), str(tmp_path / "log")]
    settings = Settings(
        worker_command=[*worker, str(_verified_answer(tmp_path / "answer.json"))],
        gpu_index=GPUS,
        cache_dir=str(tmp_path / "cache"),
    )
    with keep_spare_workers():
        return run_loop(
            client,
            kb,
            harness,
            rollouts=3,
            depth=1,
            seed=5,
            settings=settings,
            run_rollouts=runner_for(settings),
            **run_options,
        )


def test_every_evaluation_runs_in_its_gpus_worker_started_before_it(
    openai_server, client, kb, tmp_path
):
    openai_server.responder = by_prompt("verified 0.5")
    watched = WatchedEvaluate(tmp_path)
    outcome = _optimize(tmp_path, client, kb, watched)

    assert outcome.error is None and outcome.improved
    assert [step.outcome for step in outcome.steps] == ["success"] * 3
    requests = [event for event in events(tmp_path / "log") if event["event"] == "request"]
    # the original, three candidates, and the best one again under compute-sanitizer
    assert len(requests) == len(watched.calls) == 5
    assert len({request["pid"] for request in requests}) == 5  # one request per process
    for gpu in GPUS:
        calls = [alive for on, alive in watched.calls if on == gpu]
        served = [request["pid"] for request in requests if request["gpu"] == gpu]
        assert served, f"no rollout ran on GPU {gpu}"
        for pid, alive in zip(served, calls, strict=True):
            assert alive.get(pid) == gpu  # running before the call, started for its GPU
    # GPU 1's first worker was already running when the original's evaluation began.
    first_on_gpu1 = next(request["pid"] for request in requests if request["gpu"] == 1)
    _, before_the_original = watched.calls[0]
    assert before_the_original.get(first_on_gpu1) == 1
    assert none_left(tmp_path) == []


def test_a_cancelled_run_leaves_no_worker(openai_server, client, kb, tmp_path):
    openai_server.responder = by_prompt("verified 0.5")
    waiting_when_cancelled = []

    def cancelled() -> bool:
        waiting_when_cancelled.append(sorted(_workers(tmp_path).values()))
        return True

    outcome = _optimize(tmp_path, client, kb, cancelled=cancelled)
    assert outcome.cancelled and not outcome.steps
    assert waiting_when_cancelled[0] == GPUS  # each rollout GPU's spare, waiting
    assert none_left(tmp_path) == []


def test_a_run_that_dies_of_an_exception_leaves_no_worker(client, kb, tmp_path):
    def crashing_lower(*_args, **_kwargs):
        assert sorted(_workers(tmp_path).values()) == GPUS  # the spares are up
        raise RuntimeError("the lowering agent crashed")

    with pytest.raises(RuntimeError, match="lowering agent crashed"):
        _optimize(tmp_path, client, kb, lower=crashing_lower)
    assert none_left(tmp_path) == []
