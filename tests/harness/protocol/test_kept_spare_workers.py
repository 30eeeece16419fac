"""Spare workers for callers without an event loop (`keep_spare_workers`): each request after the
first runs in a worker process started before the request existed, one request per process,
each GPU's from its own spare; and when the block ends — normally, by an exception, by Ctrl-C,
with a request still running — no worker is left. Real processes: a worker that logs its life
(tests/logging_worker.py), and the real harness worker, which on a machine without a GPU
answers with its no-GPU verdict."""

from __future__ import annotations

import concurrent.futures
import contextvars
import os
import signal
import sys
import threading
from pathlib import Path

import msgspec
import psutil
import pytest

from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.harness.protocol.worker_client import (
    keep_spare_workers,
    prewarm_harness_workers,
    run_harness_sync,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import Settings
from tests.logging_worker import events
from tests.process_leaks import leftovers, none_left, started_settled, wait_for
from tests.tests_paths import EXAMPLES

TESTS = Path(__file__).resolve().parents[2]
ANSWERED = WorkerResponse(error=HarnessError(kind="crash", message="answered by the log worker"))


def _settings(tmp_path: Path, answer: str = "answer", gpu: int = 0) -> Settings:
    """Settings whose worker is the logging worker, answering ANSWERED (or hanging)."""
    if answer == "answer":
        (tmp_path / "answer.json").write_bytes(msgspec.json.encode(ANSWERED))
        answer = str(tmp_path / "answer.json")
    command = [sys.executable, str(TESTS / "logging_worker.py"), str(tmp_path / "log"), answer]
    return Settings(worker_command=command, gpu_index=gpu, cache_dir=str(tmp_path / "cache"))


def _request(settings: Settings) -> WorkerRequest:
    return WorkerRequest(task="check", source=str(EXAMPLES / "relu.cu"), settings=settings)


def _run(settings: Settings) -> WorkerResponse:
    return run_harness_sync(_request(settings), settings)


def _waiting(tmp_path: Path) -> set[int]:
    """The worker processes alive now (every process of the test names its folder)."""
    return {process.pid for process in leftovers(tmp_path)}


def _served(tmp_path: Path) -> list[int]:
    """The pid of each request's worker, in the order the requests were read."""
    return [event["pid"] for event in events(tmp_path / "log") if event["event"] == "request"]


def test_each_request_after_the_first_runs_in_a_worker_started_before_it(tmp_path):
    settings = _settings(tmp_path)
    alive_before = []
    with keep_spare_workers():
        for index in range(3):
            if index:  # the spare started as the previous request ended: a moment later, maybe
                assert wait_for(lambda: len(_waiting(tmp_path)) == 1), _waiting(tmp_path)
            alive_before.append(_waiting(tmp_path))
            assert _run(settings) == ANSWERED
        # the next request's worker, waiting
        assert wait_for(lambda: len(_waiting(tmp_path)) == 1), _waiting(tmp_path)
    first, *later = _served(tmp_path)
    assert alive_before[0] == set()  # nothing was started before the first request
    for pid, alive in zip(later, alive_before[1:], strict=True):
        assert alive == {pid}  # the one waiting when the request was made is the one that ran it
    assert len({first, *later}) == 3  # one request per worker process
    started = [event for event in events(tmp_path / "log") if event["event"] == "started"]
    assert {event["prewarm"] for event in started} == {"0"}  # on the request's GPU
    assert none_left(tmp_path) == []


def test_without_the_block_every_request_starts_its_own_worker(tmp_path):
    settings = _settings(tmp_path)
    assert _run(settings) == ANSWERED
    assert _run(settings) == ANSWERED
    started = [event for event in events(tmp_path / "log") if event["event"] == "started"]
    assert [event["prewarm"] for event in started] == [None, None]
    assert none_left(tmp_path) == []


def test_a_dead_spare_is_replaced_never_used(tmp_path):
    settings = _settings(tmp_path)
    with keep_spare_workers():
        prewarm_harness_workers(settings, [0])
        # started; a process just exec'd may show its command line a moment later
        assert wait_for(lambda: len(leftovers(tmp_path)) == 1)
        (spare,) = leftovers(tmp_path)
        spare.kill()
        # Gone once the spares' event loop has reaped it, which is how that loop learns of it.
        assert wait_for(lambda: not psutil.pid_exists(spare.pid))
        assert _run(settings) == ANSWERED
    (pid,) = _served(tmp_path)
    assert pid != spare.pid
    assert none_left(tmp_path) == []


def test_requests_from_two_threads_run_in_their_own_gpus_spares(tmp_path):
    on_gpu = {gpu: _settings(tmp_path, gpu=gpu) for gpu in (0, 1)}
    with keep_spare_workers():
        prewarm_harness_workers(on_gpu[0], [0, 1])
        # both started; a loaded machine may show the second's command line a moment later
        assert wait_for(lambda: len(leftovers(tmp_path)) == 2)
        prewarmed = {p.pid: p.environ()["KERNELBLASTER_PREWARM"] for p in leftovers(tmp_path)}
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            answers = [
                pool.submit(contextvars.copy_context().run, _run, on_gpu[gpu]) for gpu in (0, 1)
            ]
            assert [answer.result() for answer in answers] == [ANSWERED, ANSWERED]
    assert sorted(prewarmed.values()) == ["0", "1"]
    requests = [event for event in events(tmp_path / "log") if event["event"] == "request"]
    assert {event["pid"]: str(event["gpu"]) for event in requests} == prewarmed
    assert none_left(tmp_path) == []


def test_an_exception_in_the_block_kills_every_worker(tmp_path):
    settings = _settings(tmp_path)
    with pytest.raises(ValueError, match="the caller failed"), keep_spare_workers():
        assert _run(settings) == ANSWERED
        prewarm_harness_workers(settings, [1])
        assert wait_for(lambda: len(_waiting(tmp_path)) == 2)  # a spare on GPU 0 and 1
        raise ValueError("the caller failed")
    assert none_left(tmp_path) == []


def test_a_request_still_running_when_the_block_ends_is_killed(tmp_path):
    settings = _settings(tmp_path, answer="hang")
    outcome: dict[str, Exception | WorkerResponse] = {}

    def rollout() -> None:
        try:
            outcome["response"] = _run(settings)
        except concurrent.futures.CancelledError as exc:
            outcome["raised"] = exc
        try:
            _run(settings)  # the run is over: refused, not run in a worker nobody would kill
        except RuntimeError as exc:
            outcome["afterwards"] = exc

    with keep_spare_workers():
        thread = threading.Thread(target=contextvars.copy_context().run, args=(rollout,))
        thread.start()
        assert wait_for(lambda: _served(tmp_path)), "the request never reached its worker"
    thread.join(timeout=30)
    assert "raised" in outcome  # its request was cancelled, its worker killed
    assert "closed" in str(outcome.get("afterwards"))
    assert none_left(tmp_path) == []


def test_ctrl_c_while_waiting_for_a_worker_kills_it(tmp_path):
    settings = _settings(tmp_path, answer="hang")

    def interrupt_once_it_runs() -> None:
        if wait_for(lambda: _served(tmp_path)):
            os.kill(os.getpid(), signal.SIGINT)  # the main thread raises KeyboardInterrupt

    interrupter = threading.Thread(target=interrupt_once_it_runs)
    # The request never answers, so the interruption can only land inside this block.
    with pytest.raises(KeyboardInterrupt), keep_spare_workers():
        interrupter.start()
        _run(settings)
    interrupter.join()
    assert none_left(tmp_path) == []


def test_the_real_worker_answers_from_a_prewarmed_spare(tmp_path):
    """On this machine (no GPU) the harness worker builds nothing it can run: a missing source
    is refused at once. The spare it ran in had imported torch before the request came."""
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    missing = WorkerRequest(task="check", source=str(tmp_path / "missing.cu"), settings=settings)
    fresh = run_harness_sync(missing, settings)
    with keep_spare_workers():
        prewarm_harness_workers(settings, [0])
        (spare,) = _harness_workers()
        assert spare.environ()["KERNELBLASTER_PREWARM"] == "0"
        assert wait_for(lambda: _loaded_torch(spare), timeout=60), "the spare never imported torch"
        assert run_harness_sync(missing, settings) == fresh
        assert not spare.is_running()  # it ran the request and was ended with it
        (replacement,) = _harness_workers()  # started before the request's answer came back
    assert fresh.error is not None and fresh.error.kind == "bad_target"
    assert replacement.pid != spare.pid
    replacement.wait(timeout=10)  # killed when the block ended


def _harness_workers() -> list[psutil.Process]:
    """The harness workers started here: by exec, or forked by the worker zygote (the first
    spare is exec'd while the zygote imports torch; its replacement may be forked), those just
    started included."""
    started_settled()
    found = []
    for child in psutil.Process().children():
        line = child.cmdline()
        if "kernelblaster.harness.worker" in line:
            found.append(child)
        elif "kernelblaster.harness.worker.zygote" in line:
            found += child.children()
    return found


def _loaded_torch(process: psutil.Process) -> bool:
    return any("libtorch" in Path(m.path).name for m in process.memory_maps())
