"""Spare workers: the next job's worker is already started (and prewarmed) when it's needed."""

from __future__ import annotations

import asyncio
import re
import sys
import time

import msgspec
import psutil

from kernelblaster.harness.protocol import worker_client
from kernelblaster.harness.protocol.worker_client import SpareWorkers, run_worker
from kernelblaster.harness.protocol.worker_protocol import (
    WorkerMessage,
    WorkerRequest,
    WorkerResponse,
)
from tests.process_leaks import started_settled, wait_for

# A worker that notes when it started and whether it was asked to prewarm, then answers.
WORKER = r"""
import json, os, sys, time
started = time.time()
sys.stdin.read()
note = f"{started} {os.getpid()} {os.environ.get('KERNELBLASTER_PREWARM', '')}"
print(json.dumps({"type": "result", "error": {"kind": "crash", "message": note}}))
"""


async def _run(spares: SpareWorkers, worker: str = WORKER, **options) -> tuple[float, int, str]:
    """The job's worker's start (its own clock: psutil's create_time counts from the boot
    time, which /proc/stat rounds to the second), pid and the rest of its answer (WORKER's
    prewarm setting; GPU_WORKER's moment the GPU was free and its last moment); `options` are
    run_worker's."""
    response = await run_worker(
        [sys.executable, "-c", worker],
        WorkerRequest(task="build", source="/nonexistent.cu"),
        msgspec.json.Decoder(WorkerMessage),
        WorkerResponse,
        lambda _: None,
        timeout_s=30,
        spares=spares,
        **options,
    )
    started, pid, last = response.error.message.split(" ", 2)
    return float(started), int(pid), last


async def test_second_job_uses_the_worker_started_after_the_first():
    spares = SpareWorkers()
    try:
        _, first_pid, prewarm = await _run(spares)
        # The spare up and waiting: its own clock must read earlier than the request's, and
        # no event says its Python has started
        await asyncio.sleep(1.0)
        requested = time.time()
        started, second_pid, _ = await _run(spares)
        assert prewarm == "0"  # the GPU index to prewarm
        assert second_pid != first_pid
        assert started < requested  # it was running before the job asked for it
    finally:
        await spares.close()


async def test_the_replacement_starts_only_once_the_job_has_ended():
    """Not beside the job's worker while it verifies and times its kernel."""
    spares = SpareWorkers()
    slow = WORKER.replace("sys.stdin.read()", "sys.stdin.read(); time.sleep(1.0)")
    try:
        _, first_pid, _ = await _run(spares, slow)
        ended = time.time()
        (spare,) = spares.waiting()
        started, second_pid, _ = await _run(spares, slow)
        assert second_pid == spare.pid != first_pid
        # started after the job's second of work, when the job had answered
        assert started > ended - 0.5
    finally:
        await spares.close()


# A job that says it has verified and timed its kernel (a progress message with its check),
# then profiles for a second; as a spare, it notes when it started and when its pipe told it
# the GPU was free (GPU_FREE_FD_ENV), then answers.
GPU_WORKER = r"""
import json, os, sys, threading, time
started = time.time()
free = {}
def wait_for_the_gpu():
    with os.fdopen(int(os.environ["KERNELBLASTER_GPU_FREE_FD"]), "rb") as pipe:
        pipe.read()
    free["at"] = time.time()
waiting = None
if os.environ.get("KERNELBLASTER_GPU_FREE_FD"):
    waiting = threading.Thread(target=wait_for_the_gpu)
    waiting.start()
sys.stdin.read()
check = {"source": "k.cu", "target_kind": "plain"}
print(json.dumps({"type": "progress", "phase": "profile", "message": "timed", "check": check}))
sys.stdout.flush()
time.sleep(1.0)
if waiting is not None:
    waiting.join(10)
note = f"{started} {os.getpid()} {free.get('at', 'none')} {time.time()}"
print(json.dumps({"type": "result", "error": {"kind": "crash", "message": note}}))
"""


async def _run_timed(spares: SpareWorkers) -> tuple[float, int, str, float]:
    """A GPU_WORKER job whose next spare starts once it has timed its kernel: its worker's
    start, pid, when the GPU was free to it ("none" without a pipe) and its last moment (its
    answer written: it exits next). Times by the workers' own clocks, so that a loaded machine
    slowing this test down moves none of them."""
    started, pid, rest = await _run(
        spares, GPU_WORKER, spare_from=lambda message: message.check is not None
    )
    free, done = rest.split(" ")
    return started, pid, free, float(done)


async def test_the_next_spare_starts_once_the_job_has_timed_but_waits_for_its_exit_for_the_gpu():
    spares = SpareWorkers()
    try:
        # the first job runs in a worker started for it, with no one before it to wait for
        _, first_pid, first_free, first_done = await _run_timed(spares)
        assert first_free == "none"
        (spare,) = spares.waiting()
        second_started, second_pid, second_free, _ = await _run_timed(spares)
        assert second_pid == spare.pid != first_pid
        # started during the job's second of profiling, before the job's worker had answered
        assert second_started < first_done
        # the GPU was its own only once the job before it had ended (after its last moment)
        assert float(second_free) >= first_done
    finally:
        await spares.close()


async def test_a_spare_taken_for_a_request_may_use_the_gpu_at_once():
    """Its request comes when the GPU is the request's (the caller's GPU slot), even if the
    worker it was told to wait for still runs (two jobs sharing a GPU)."""
    spares = SpareWorkers()
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    command = [sys.executable, "-c", GPU_WORKER]
    try:
        await spares.ready(command, after=other)
        await asyncio.sleep(0.5)
        taken = time.time()
        _, _, free_at, _ = await _run_timed(spares)
        assert other.returncode is None  # still running
        assert taken <= float(free_at) < taken + 2.0
    finally:
        other.kill()
        await other.wait()
        await spares.close()


async def test_a_dead_spare_is_replaced_not_used():
    spares = SpareWorkers()
    try:
        await _run(spares)
        (spare,) = spares.waiting()
        spare.kill()
        await spare.wait()
        _, pid, _ = await _run(spares)
        assert pid != spare.pid
    finally:
        await spares.close()


async def test_two_jobs_at_once_on_one_gpu_keep_one_spare_and_lose_none():
    spares = SpareWorkers()
    try:
        # Both start a worker, and a replacement when done, at once: one replacement is kept.
        (_, first, _), (_, second, _) = await asyncio.gather(_run(spares), _run(spares))
        assert first != second
        assert len(_workers()) == 1
    finally:
        await spares.close()
    assert wait_for(lambda: not _workers()), "a spare outlived close()"


def _workers(script: str = WORKER) -> list[psutil.Process]:
    """This test's worker processes (running `script`) still running, those just started
    included."""
    started_settled()
    return [
        child
        for child in psutil.Process().children()
        if script in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE
    ]


PREWARM_PROBE = r"""
import json, shutil, sys
from kernelblaster.harness.worker import serve as worker
from kernelblaster.harness.build.cache import _nvcc_versions
from kernelblaster.harness.build.gpu_arch import _query_gpu
before = {"check": "kernelblaster.harness.check.check" in sys.modules,
          "arch": _query_gpu.cache_info().currsize}
worker._prewarm(0)
print(json.dumps({
    "before": before,
    "modules": [m for m in ("kernelblaster.harness.check.check",
                            "kernelblaster.harness.profile.counters",
                            "kernelblaster.harness.profile.profile") if m in sys.modules],
    "arch_queries": _query_gpu.cache_info().currsize,
    "nvcc_versions": len(_nvcc_versions),
    "nvcc": shutil.which("nvcc") is not None,
}))
"""


def test_a_prewarmed_worker_has_done_what_every_request_starts_with():
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", PREWARM_PROBE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["before"] == {"check": False, "arch": 0}
    assert seen["modules"] == [
        "kernelblaster.harness.check.check",
        "kernelblaster.harness.profile.counters",
        "kernelblaster.harness.profile.profile",
    ]
    assert seen["arch_queries"] == 1  # the GPU's arch (or why there is none) remembered
    assert seen["nvcc_versions"] == (1 if seen["nvcc"] else 0)


BUILD_DURING_PREWARM = r"""
import io, json, sys, threading
import msgspec
from kernelblaster.harness.worker import serve as worker
from kernelblaster.harness.protocol.records import BuildResult

building = threading.Event()
order = []

# stands in for the torch import: it lasts until the build has begun
def prewarm(gpu_index, expected=None):
    order.append("prewarm began")
    order.append("prewarm saw the build" if building.wait(10) else "prewarm waited in vain")

def build(target, settings):
    order.append("build")
    building.set()
    return BuildResult(ok=True, source=target.source, arch="sm_90")

worker._prewarm, worker._build = prewarm, build
sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[1].encode()))
worker.main()
worker._prewarming.join()
print(json.dumps(order), file=sys.stderr)
"""


def test_a_request_that_comes_while_the_spare_prewarms_is_built_meanwhile(tmp_path):
    import json
    import os
    import shutil
    import subprocess
    from pathlib import Path

    examples = Path(__file__).resolve().parents[3] / "examples"
    for name in ("relu.cu", "relu.py"):
        shutil.copyfile(examples / name, tmp_path / name)
    request = WorkerRequest(task="build", source=str(tmp_path / "relu.cu"))
    done = subprocess.run(
        [sys.executable, "-c", BUILD_DURING_PREWARM, msgspec.json.encode(request).decode()],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERNELBLASTER_PREWARM": "0"},
    )
    assert done.returncode == 0, done.stderr
    order = json.loads(done.stderr.strip().splitlines()[-1])
    # the build ran while the prewarm was still under way (which of the two began first is
    # the threads' business)
    assert sorted(order[:2]) == ["build", "prewarm began"]
    assert order[2:] == ["prewarm saw the build"]


WARM_WAITS = r"""
import sys, threading
from kernelblaster.harness.worker import serve as worker
warming = threading.Thread(target=worker._warm, args=(0,))
warming.start()
warming.join(5.0)  # the imports, nvidia-smi, nvcc --version: then the pipe
print("waiting" if warming.is_alive() else "done without waiting", flush=True)
sys.stdin.readline()  # the test closes the pipe's write end, then writes a line
warming.join(10.0)
print("waiting" if warming.is_alive() else "done", flush=True)
"""


def test_a_spare_creates_no_cuda_context_until_its_pipe_says_the_gpu_is_free():
    import os
    import subprocess

    read_end, write_end = os.pipe()
    probe = subprocess.Popen(
        [sys.executable, "-c", WARM_WAITS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERNELBLASTER_GPU_FREE_FD": str(read_end)},
        pass_fds=(read_end,),
    )
    os.close(read_end)
    try:
        assert probe.stdout.readline().strip() == "waiting"
        os.close(write_end)
        write_end = None
        probe.stdin.write("go\n")
        probe.stdin.flush()
        assert probe.stdout.readline().strip() == "done"
    finally:
        if write_end is not None:
            os.close(write_end)
        probe.kill()
        probe.wait()


async def test_requests_faster_than_a_spare_warms_up_keep_more_spares(monkeypatch):
    """Saves every second or two: as many spares as were taken within a warm-up (up to
    three), the next started with the request when too few are left, not at its end."""
    monkeypatch.setattr(worker_client, "WARM_UP_S", 60.0)
    spares = SpareWorkers(most=3)
    slow = WORKER.replace("sys.stdin.read()", "sys.stdin.read(); time.sleep(1.0)")
    try:
        await _run(spares, slow)
        assert len(spares.waiting()) == 1
        job = asyncio.create_task(_run(spares, slow))  # the second within a warm-up
        await asyncio.sleep(0.5)
        assert not job.done()
        assert len(spares.waiting()) == 2  # started with the request
        await job
        await _run(spares, slow)
        assert spares.wanted([sys.executable, "-c", slow]) == 3 == len(spares.waiting())
        await _run(spares, slow)
        assert len(spares.waiting()) == 3 == len(_workers(slow))  # `most`
    finally:
        await spares.close()
    assert wait_for(lambda: not _workers(slow)), "a spare outlived close()"


async def test_spares_kept_while_requests_are_rare_are_at_least_least():
    spares = SpareWorkers(least=3, most=4)
    try:
        await _run(spares)
        assert len(spares.waiting()) == 3
    finally:
        await spares.close()


async def test_a_warm_spare_expecting_the_request_is_taken_before_an_older_one(monkeypatch):
    """Two files saved in turn: the spare told to expect this file's request (its reference
    side made ahead) is taken, not the older one made for the other file."""
    monkeypatch.setattr(worker_client, "WARM_UP_S", 0.0)  # every spare counts as warm
    spares = SpareWorkers(least=2, most=2)
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    first, second = {"KB_EXPECT_TEST": "first.cu"}, {"KB_EXPECT_TEST": "second.cu"}
    try:
        await spares.ready(command, hint=first)
        taken = await spares.take(command, hint=first)
        taken.kill()
        await taken.wait()
        await spares.ready(command, hint=second)
        older, newer = spares.waiting()
        started_settled()  # its environment is there once its exec is done
        assert psutil.Process(older.pid).environ()["KB_EXPECT_TEST"] == "first.cu"
        chosen = await spares.take(command, hint=second)
        assert chosen.pid == newer.pid
        chosen.kill()
        await chosen.wait()
    finally:
        await spares.close()


async def test_the_server_log_says_which_spare_a_request_took(monkeypatch, caplog):
    """The log line the editing-rhythm bench reads to attribute a slow save: the spare's age,
    whether it expected this request, and none alive at all."""
    monkeypatch.setattr(worker_client, "WARM_UP_S", 0.0)
    spares = SpareWorkers(least=1, most=1)
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    first, second = {"KB_EXPECT_TEST": "first.cu"}, {"KB_EXPECT_TEST": "second.cu"}
    caplog.set_level("INFO", logger=worker_client.__name__)
    taken = []
    try:
        await spares.ready(command, hint=first)
        taken.append(await spares.take(command, hint=second))
        taken.append(await spares.take(command, hint=second))
    finally:
        for process in taken:
            process.kill()
            await process.wait()
        await spares.close()
    said = [r.getMessage() for r in caplog.records if r.name == worker_client.__name__]
    assert re.search(
        rf"spare worker {taken[0].pid} taken on GPU 0: [\d.]+ s old, exec.d, expects another",
        said[0],
    )
    assert said[1].startswith("no spare worker alive on GPU 0: one started for the request")
