"""A spare worker is told the request that ran before it and makes that request's reference
side while it waits (harness/worker/reference_ahead.py); its own request takes that side only when
its reference is the same and unchanged. Here: what the spare is told, when a side counts as
the same, how a request takes or refuses a side made (or still being made) on another thread,
and the real worker told to expect a request on this machine, which has no GPU to make a side
on. tests/harness/worker/test_reference_ahead_gpu.py checks with sides made on a GPU."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import psutil
import pytest

from kernelblaster.harness.check import check
from kernelblaster.harness.protocol.worker_client import SpareWorkers, run_harness
from kernelblaster.harness.protocol.worker_protocol import (
    EXPECTED_REQUEST_ENV,
    WorkerRequest,
    WorkerResponse,
    expected_request_env,
)
from kernelblaster.harness.target.reference_side import ReferenceSide
from kernelblaster.harness.target.targets import Target
from kernelblaster.harness.worker.reference_ahead import ReferenceAhead, reference_key
from kernelblaster.settings import Settings
from tests.process_leaks import started_settled
from tests.tests_paths import EXAMPLES

TESTS = Path(__file__).resolve().parents[2]


def _copy(name: str, folder: Path) -> Target:
    folder.mkdir(exist_ok=True)
    for suffix in (".cu", ".py"):
        shutil.copy(EXAMPLES / f"{name}{suffix}", folder / f"{name}{suffix}")
    return Target(
        kind="plain",
        source=str(folder / f"{name}.cu"),
        entry="",
        reference=str(folder / f"{name}.py"),
    )


def _touch_later(path: Path) -> None:
    later = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(later, later))


# --- what a spare is told ---------------------------------------------------------------------


def test_the_hint_is_the_request_without_its_texts_and_builds_get_none():
    request = WorkerRequest(
        task="check", source="/w/relu.cu", settings=Settings(trials=5), source_text="__global__ ..."
    )
    (told,) = expected_request_env(request).items()
    assert told[0] == EXPECTED_REQUEST_ENV
    assert msgspec.json.decode(told[1], type=WorkerRequest) == msgspec.structs.replace(
        request, source_text=None
    )
    build = WorkerRequest(task="build", source="/w/relu.cu", unsaved_text="edited")
    assert expected_request_env(build) == {}


def test_the_spare_started_after_a_request_is_told_that_request(tmp_path):
    """run_harness on spares: the replacement spare's environment names the request just run."""
    answer = tmp_path / "answer.json"
    answer.write_bytes(msgspec.json.encode(WorkerResponse()))
    command = [sys.executable, str(TESTS / "logging_worker.py"), str(tmp_path / "log"), str(answer)]
    settings = Settings(worker_command=command, cache_dir=str(tmp_path / "cache"))
    request = WorkerRequest(
        task="profile",
        source=str(EXAMPLES / "relu.cu"),
        settings=settings,
        source_text="// a candidate's text",
    )

    async def run() -> dict[str, str]:
        spares = SpareWorkers()
        try:
            await run_harness(request, settings, spares=spares)
            (spare,) = spares.waiting()
            started_settled()  # its environment is there once its exec is done
            return psutil.Process(spare.pid).environ()
        finally:
            await spares.close()

    environment = asyncio.run(run())
    assert environment["KERNELBLASTER_PREWARM"] == "0"
    told = msgspec.json.decode(environment[EXPECTED_REQUEST_ENV], type=WorkerRequest)
    assert told == msgspec.structs.replace(request, source_text=None)


# --- when a side is the same ------------------------------------------------------------------


def test_a_side_is_keyed_by_the_reference_its_modules_the_gpu_and_the_trials(tmp_path):
    target = _copy("relu", tmp_path / "w")
    settings = Settings()
    key = reference_key(target, settings)
    assert key is not None and key == reference_key(target, settings)
    (tmp_path / "w" / "notes.txt").write_text("not a module")
    assert reference_key(target, settings) == key  # only .py files are the reference's code
    assert reference_key(target, Settings(trials=settings.trials + 1)) != key
    assert reference_key(target, Settings(gpu_index=1)) != key
    helper = tmp_path / "w" / "helpers.py"
    helper.write_text("SCALE = 1\n")
    with_helper = reference_key(target, settings)
    assert with_helper != key  # a module the reference may import
    _touch_later(helper)
    assert reference_key(target, settings) != with_helper
    _touch_later(Path(target.reference))
    assert reference_key(target, settings) not in (key, with_helper)
    assert reference_key(msgspec.structs.replace(target, reference=None), settings) is None


# --- taking a side ----------------------------------------------------------------------------


_NO_CLEAN_PROCESS = None  # the stand-in for check.prepare_reference opens no session
CPU = "cpu"  # where a spare measures the memory free for its side (the host's, here)


class _Making:
    """check.prepare_reference as the spare calls it, made slow and observable: it makes its
    side step by step, asking `abandon()` between steps as the real one does."""

    def __init__(self, steps: int = 20, failure: Exception | None = None):
        self.steps = steps
        self.failure = failure
        self.began = threading.Event()
        self.abandoned_at: int | None = None

    def __call__(self, target, settings, *, clean, abandon) -> ReferenceSide:
        self.began.set()
        side = ReferenceSide(seconds={"reference_load": 0.5, "reference_sets": 0.25})
        for step in range(self.steps):
            if abandon():
                self.abandoned_at = step
                return side
            time.sleep(0.02)
        side.probe = object() if self.failure is None else None
        side.failure = self.failure
        return side


def _make_beside(ahead: ReferenceAhead, target: Target, settings: Settings) -> threading.Thread:
    thread = threading.Thread(
        target=ahead.make, args=(target, settings, _NO_CLEAN_PROCESS), kwargs={"device_name": CPU}
    )
    thread.start()
    return thread


def test_a_request_for_the_same_reference_waits_for_the_side_and_takes_it(tmp_path, monkeypatch):
    making = _Making()
    monkeypatch.setattr(check, "prepare_reference", making)
    target, settings = _copy("relu", tmp_path / "w"), Settings()
    ahead = ReferenceAhead()
    maker = _make_beside(ahead, target, settings)
    assert making.began.wait(5)
    side = ahead.take(target, settings)  # still being made: waits for it
    maker.join()
    assert side is not None and making.abandoned_at is None
    assert side.seconds["ahead_reference_load"] == 0.5  # made before the request: renamed
    assert side.seconds["ahead_reference_sets"] == 0.25
    assert 0.0 < side.seconds["reference_wait"] < 5.0
    assert "reference_load" not in side.seconds
    assert ahead.take(target, settings) is None  # handed out once


def test_a_request_for_another_reference_stops_the_making_and_gets_none(tmp_path, monkeypatch):
    making = _Making(steps=500)  # 10 s if nothing stopped it
    monkeypatch.setattr(check, "prepare_reference", making)
    relu, softmax = _copy("relu", tmp_path / "a"), _copy("softmax", tmp_path / "b")
    ahead = ReferenceAhead()
    maker = _make_beside(ahead, relu, Settings())
    assert making.began.wait(5)
    began = time.perf_counter()
    assert ahead.take(softmax, Settings()) is None
    assert time.perf_counter() - began < 2.0
    maker.join()
    assert making.abandoned_at is not None and making.abandoned_at < 500


def test_a_request_for_another_reference_before_the_making_began_stops_it_unbegun(
    tmp_path, monkeypatch
):
    """The request comes while the spare is still warming up (its prewarm thread not yet at
    `make`, e.g. waiting for the GPU): it must not wait for a whole side made for the other
    file before making its own (the H100 busy open: ~2.5 s lost)."""
    making = _Making(steps=500)
    monkeypatch.setattr(check, "prepare_reference", making)
    relu, softmax = _copy("relu", tmp_path / "a"), _copy("softmax", tmp_path / "b")
    ahead = ReferenceAhead()
    taken: list[object] = []
    taker = threading.Thread(target=lambda: taken.append(ahead.take(softmax, Settings())))
    taker.start()
    time.sleep(0.1)  # the request waits for the prewarm thread, which reaches `make` now
    began = time.perf_counter()
    ahead.make(relu, Settings(), _NO_CLEAN_PROCESS, device_name=CPU)
    taker.join(timeout=5)
    assert taken == [None] and time.perf_counter() - began < 1.0
    assert not making.began.is_set()  # nothing of relu's side was made


def test_a_reference_changed_since_the_side_was_made_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "prepare_reference", _Making(steps=1))
    target, settings = _copy("relu", tmp_path / "w"), Settings()
    ahead = ReferenceAhead()
    ahead.make(target, settings, _NO_CLEAN_PROCESS, device_name=CPU)
    _touch_later(Path(target.reference))  # the user saved the reference meanwhile
    assert ahead.take(target, settings) is None
    ahead = ReferenceAhead()
    ahead.make(target, settings, _NO_CLEAN_PROCESS, device_name=CPU)
    assert ahead.take(target, Settings(trials=settings.trials + 2)) is None


def test_a_side_whose_making_failed_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "prepare_reference", _Making(steps=1, failure=RuntimeError("OOM")))
    target, settings = _copy("relu", tmp_path / "w"), Settings()
    ahead = ReferenceAhead()
    ahead.make(target, settings, _NO_CLEAN_PROCESS, device_name=CPU)
    assert ahead.take(target, settings) is None  # the request makes it, and meets the failure


def test_a_side_the_request_does_not_need_is_stopped_and_dropped(tmp_path, monkeypatch):
    """A request that makes no reference side (a build, a KernelBench solution): the making
    stops at its next step, and what it made is not kept through the request's check."""
    making = _Making(steps=500)
    monkeypatch.setattr(check, "prepare_reference", making)
    target = _copy("relu", tmp_path / "w")
    ahead = ReferenceAhead()
    maker = _make_beside(ahead, target, Settings())
    assert making.began.wait(5)
    ahead.unwanted()
    maker.join(timeout=2.0)
    assert not maker.is_alive() and making.abandoned_at is not None
    monkeypatch.setattr(check, "prepare_reference", _Making(steps=1))
    finished = ReferenceAhead()
    finished.make(
        target, Settings(), _NO_CLEAN_PROCESS, device_name=CPU
    )  # made in full before the request came
    finished.drop()
    assert finished.take(target, Settings()) is None  # taken, it would have been handed out


def test_nothing_made_means_the_request_makes_its_own_at_once(tmp_path):
    ahead = ReferenceAhead()
    ahead.nothing_to_make()
    assert ahead.take(_copy("relu", tmp_path / "w"), Settings()) is None


# --- the real worker, told what to expect, on this machine ------------------------------------


def _worker(request: WorkerRequest, environment: dict[str, str]) -> tuple[WorkerResponse, str]:
    done = subprocess.run(
        [sys.executable, "-m", "kernelblaster.harness.worker"],
        input=msgspec.json.encode(request),
        capture_output=True,
        env={**os.environ, "KERNELBLASTER_PREWARM": "0", **environment},
        timeout=180,
    )
    last = done.stdout.decode().strip().splitlines()[-1]
    return msgspec.json.decode(last, type=WorkerResponse), done.stderr.decode()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_real_worker_told_to_expect_a_request_answers_as_without(tmp_path):
    """No GPU here (or a CPU-only torch): nothing is made ahead, and the request gets the same
    verdict as a spare told nothing (or told garbage, which is logged and ignored)."""
    folder = tmp_path / "w"
    target = _copy("relu", folder)
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    request = WorkerRequest(task="check", source=target.source, settings=settings)
    untold, _ = _worker(request, {})
    told, _ = _worker(request, expected_request_env(request))
    garbled, stderr = _worker(request, {EXPECTED_REQUEST_ENV: "{not json"})
    assert untold.error is not None
    assert untold.error.kind in ("no_gpu", "no_driver", "torch_missing")
    assert told.error == untold.error and garbled.error == untold.error
    assert told.build is not None and told.build.ok
    assert f"ignoring {EXPECTED_REQUEST_ENV}" in stderr
