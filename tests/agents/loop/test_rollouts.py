"""Rollouts at once: one worker per GPU in this process, or Ray tasks on a real local Ray cluster
with two fake GPUs. Either way the rollouts share one KB, every attempt lands in it, and a
rollout that starts later ranks with what the earlier ones recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernelblaster.agents.loop.rollout_runners import OnGpus, on_gpus, runner_for
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings
from tests.agents.loop.rollout_harness import GpuLoggingHarness, by_prompt
from tests.agents.loop.test_loop import run_loop

TESTS = Path(__file__).resolve().parents[2]


def _three_greedy_rollouts(client, kb, harness, run_rollouts):
    """Three rollouts of one step each, greedy (k=1); every candidate the scripted LLM writes
    fails to compile, which lowers its technique's predicted speedup."""
    return run_loop(client, kb, harness, rollouts=3, depth=1, k=1, run_rollouts=run_rollouts)


def _assert_later_rollouts_saw_earlier_results(outcome, kb) -> None:
    first, second, third = _three_failed_steps(outcome, kb)
    # The first two ranked the empty KB at the same time; the third started once a GPU was free,
    # after one of them had recorded its failure, and ranked with it.
    choice = {s.rollout: (s.technique, s.predicted_speedup) for s in (first, second, third)}
    assert choice[0] == choice[1] and choice[2] != choice[0]
    assert {a.technique for a in kb.attempts()} == {first.technique, third.technique}


def _three_failed_steps(outcome, kb):
    assert outcome.error is None and not outcome.cancelled
    steps = sorted(outcome.steps, key=lambda s: s.rollout)
    assert [s.rollout for s in steps] == [0, 1, 2]
    assert {s.outcome for s in steps} == {"compile_error"}
    assert sorted(a.outcome for a in kb.attempts()) == ["compile_error"] * 3
    return steps


def _assert_rollouts_at_once_tried_different_techniques(outcome, kb) -> None:
    """Rollouts that rank at once (threads of one process) each take a technique none of the
    others is trying on the same kernel (agents/loop/in_flight.py): three greedy rollouts, three
    techniques, where ranking alone would have given all three the KB's best."""
    steps = _three_failed_steps(outcome, kb)
    assert len({s.technique for s in steps}) == 3
    assert {a.technique for a in kb.attempts()} == {s.technique for s in steps}


def test_settings_choose_the_runner():
    assert runner_for(Settings()) == OnGpus(gpus=[0])
    assert runner_for(Settings(gpu_index=[0, 1])) == OnGpus(gpus=[0, 1])
    assert runner_for(Settings(gpu_index=[2, 3], parallel_gpu_jobs=4)) == OnGpus([2, 3])


def test_one_worker_per_gpu_sharing_the_kb(openai_server, client, tmp_path):
    openai_server.responder = by_prompt("broken")
    harness = GpuLoggingHarness(tmp_path / "harness")
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        outcome = _three_greedy_rollouts(client, kb, harness, on_gpus([0, 1]))
        _assert_rollouts_at_once_tried_different_techniques(outcome, kb)
    evaluations = harness.evaluations()
    on_gpu = [e["gpu_index"] for e in evaluations]
    # rollout r on GPU r % 2, each checking the same number of (broken) candidates
    assert set(on_gpu) == {0, 1} and on_gpu.count(0) == 2 * on_gpu.count(1)
    assert {e["pid"] for e in evaluations} == {os.getpid()}  # threads of this process


def test_an_error_in_one_rollout_stops_the_others(openai_server, client, tmp_path):
    # The harness goes away (a GPU lost, ncu gone): every rollout would fail the same way.
    class Gone(GpuLoggingHarness):
        def __call__(self, source, text, kernel, settings, **options):
            if "KB_RESULT" in text:
                from kernelblaster.agents.loop.evaluation import Evaluation
                from kernelblaster.harness.protocol.records import HarnessError

                error = HarnessError(kind="no_gpu", message="no CUDA device", fix="attach one")
                return Evaluation(outcome="error", error=error)
            return super().__call__(source, text, kernel, settings, **options)

    openai_server.responder = by_prompt("verified 0.5")
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        outcome = run_loop(
            client, kb, Gone(tmp_path / "harness"), rollouts=6, run_rollouts=on_gpus([0, 1])
        )
    assert outcome.error is not None and "no CUDA device" in outcome.error
    assert not outcome.cancelled
    # Every rollout ran at once: each stopped at its first step, none went on to a second
    assert len(outcome.steps) <= 6 and {s.depth for s in outcome.steps} == {0}


# --- Ray -------------------------------------------------------------------------------------


@pytest.fixture
def ray_cluster():
    """A real Ray head node with two fake GPUs, started like a user would (`ray start`), whose
    workers can import the test helpers; stopped by its process group at the end."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dev]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="kbray-")  # short: Ray's socket paths must stay short
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS.parent),  # the helpers import as tests.agents.loop.<module>
        "RAY_AUTH_MODE": "disabled",  # a throwaway local cluster: no token in ~/.ray
    }
    head = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
         f"--port={port}", "--num-cpus=4", "--num-gpus=2", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                ray.init(address=address, log_to_driver=False)
                break
            except (ConnectionError, RuntimeError):
                if time.monotonic() > deadline or head.poll() is not None:
                    raise
                time.sleep(1)
        yield address
    finally:
        ray.shutdown()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        subprocess.run(["rm", "-rf", temp], check=False)


def test_rollouts_as_ray_tasks_on_fake_gpus_land_in_the_same_kb(
    ray_cluster, openai_server, client, tmp_path, monkeypatch
):
    from kernelblaster.agents.loop.ray_rollouts import on_ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    openai_server.responder = by_prompt("broken")
    harness = GpuLoggingHarness(tmp_path / "harness")
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        outcome = _three_greedy_rollouts(client, kb, harness, on_ray(ray_cluster))
        _assert_later_rollouts_saw_earlier_results(outcome, kb)  # recorded by the tasks
    evaluations = harness.evaluations()
    assert os.getpid() not in {e["pid"] for e in evaluations}  # ran in Ray's workers
    assert {e["gpu_index"] for e in evaluations} == {0}  # the one GPU each task sees...
    assert {e["visible"] for e in evaluations} == {"0", "1"}  # ...is one of the two
