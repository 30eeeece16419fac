"""The one worker client against fake workers: real processes that speak the protocol (no GPU
needed), some leaving a child behind holding their pipes, as torch.compile's compile pool or a
hung standalone program can. `run_worker` is the asyncio core (raises WorkerFailed);
`run_harness_sync` runs the harness worker with its phase budgets and turns a failure into the
response's error."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.protocol import worker_failures
from kernelblaster.harness.protocol.worker_client import run_harness_sync, run_worker
from kernelblaster.harness.protocol.worker_failures import WorkerFailed
from kernelblaster.harness.protocol.worker_protocol import (
    WorkerMessage,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.settings import Settings

# A worker that leaves a grandchild holding its stdout and stderr: the client must neither wait
# for it nor leave it.
_LEAVES_A_CHILD = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
sys.stdin.read()
print('{"type": "progress", "phase": "verify", "message": "verifying"}', flush=True)
"""
_NO_REFERENCE = (
    """print('{"type": "result", "error": {"kind": "no_reference", "message": "m", "fix": "f"}}',"""
    " flush=True)\n"
)
_CRASH = "sys.stderr.write('boom: segfault\\n'); sys.stderr.flush(); os._exit(3)\n"


def _fake_worker(tmp_path: Path, tail: str) -> tuple[list[str], Path]:
    script = tmp_path / "worker.py"
    script.write_text(_LEAVES_A_CHILD + textwrap.dedent(tail))
    pid_file = tmp_path / "child.pid"
    return [sys.executable, str(script), str(pid_file)], pid_file


def _settings(command: list[str]) -> Settings:
    return Settings(worker_command=command, run_timeout_s=1.0)


def _request() -> WorkerRequest:
    return WorkerRequest(task="check", source="k.cu")


async def _run_core(command: list[str]) -> WorkerResponse:
    return await run_worker(
        command,
        _request(),
        msgspec.json.Decoder(WorkerMessage),
        WorkerResponse,
        lambda _: None,
        timeout_s=30,
    )


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    # a killed child of an exited parent may linger as a zombie until init reaps it
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def _wait_dead(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


async def test_an_answer_is_not_held_up_by_a_leftover_child(tmp_path):
    command, pid_file = _fake_worker(tmp_path, _NO_REFERENCE)
    started = time.monotonic()
    response = await _run_core(command)
    assert response.error.kind == "no_reference"
    assert time.monotonic() - started < 10 and _wait_dead(int(pid_file.read_text()))


async def test_a_crash_is_reported_at_once_not_as_a_timeout(tmp_path):
    command, pid_file = _fake_worker(tmp_path, _CRASH)
    started = time.monotonic()
    with pytest.raises(WorkerFailed) as failed:
        await _run_core(command)
    assert time.monotonic() - started < 10  # not the 30 s timeout, nor the child's 60 s
    assert not failed.value.timed_out
    assert "exited" in str(failed.value) and "without a result" in str(failed.value)
    assert "boom: segfault" in failed.value.log
    assert _wait_dead(int(pid_file.read_text()))


def test_an_answer_returns_at_once_though_a_child_holds_the_pipe(tmp_path):
    command, pid_file = _fake_worker(tmp_path, _NO_REFERENCE)
    progress = []
    started = time.monotonic()
    response = run_harness_sync(_request(), _settings(command), on_progress=progress.append)
    assert time.monotonic() - started < 20  # not the child's 60 s
    assert response.error is not None and response.error.kind == "no_reference"
    assert [p.phase for p in progress] == ["verify"]
    assert _wait_dead(int(pid_file.read_text()))


def test_a_hung_worker_is_killed_with_its_children(tmp_path):
    command, pid_file = _fake_worker(tmp_path, "time.sleep(60)\n")
    started = time.monotonic()
    response = run_harness_sync(_request(), _settings(command))
    assert time.monotonic() - started < 20
    assert response.error is not None and response.error.kind == "timeout"
    assert "verify phase did not finish within 1 s" in response.error.message
    assert _wait_dead(int(pid_file.read_text()))


def test_a_worker_that_dies_without_answering_is_a_crash(tmp_path):
    command, _ = _fake_worker(tmp_path, _CRASH)
    response = run_harness_sync(_request(), _settings(command))
    assert response.error is not None and response.error.kind == "crash"
    assert "died during verify (exit 3)" in response.error.message
    assert "boom: segfault" in response.error.log


# How torch's process ends when a tensor is freed after a device fault: c10's message, then a
# C++ stack longer than the stderr tail the client keeps, then SIGABRT.
_ABORT_ON_A_FAULT = """
sys.stderr.write("terminate called after throwing an instance of 'c10::AcceleratorError'\\n")
sys.stderr.write("  what():  CUDA error: an illegal memory access was encountered\\n")
for frame in range(40):
    sys.stderr.write(f"frame #{frame}: c10::TensorImpl::~TensorImpl() + 0x9\\n")
sys.stderr.flush()
os.abort()
"""


def test_a_worker_aborted_by_its_kernels_device_fault_reports_the_fault(tmp_path):
    """Not a crash of ours: the kernel faulted, and the first line saying so is kept though
    the stack after it is longer than the log's tail."""
    command, _ = _fake_worker(tmp_path, _ABORT_ON_A_FAULT)
    error = run_harness_sync(_request(), _settings(command)).error
    assert error is not None and error.kind == "illegal_memory_access", error
    assert "an illegal memory access was encountered" in error.message
    assert "died of it (killed by SIGABRT)" in error.message
    assert "compute-sanitizer" in error.fix


def test_requests_are_sent_as_json(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(
        "import json, sys\n"
        "request = json.loads(sys.stdin.read())\n"
        "print(json.dumps({'type': 'result', 'error': {'kind': 'bad_target', "
        "'message': request['source'], 'fix': ''}}))\n"
    )
    response = run_harness_sync(_request(), Settings(worker_command=[sys.executable, str(script)]))
    assert response.error is not None and response.error.message == "k.cu"
    assert msgspec.json.decode(msgspec.json.encode(_request()))["task"] == "check"


def test_a_worker_stuck_compiling_is_told_to_raise_the_build_budget(tmp_path, monkeypatch):
    # A 5 MB source that compiles past the budget is not "a kernel that never ends".
    monkeypatch.setattr(worker_failures, "_REPORT_GRACE_S", 0.2)
    script = tmp_path / "compiling.py"
    script.write_text(
        "import sys, time\nsys.stdin.read()\n"
        'print(\'{"type": "progress", "phase": "build", "message": "nvcc"}\','
        " flush=True)\n"
        "time.sleep(60)\n"
    )
    settings = Settings(worker_command=[sys.executable, str(script)], build_timeout_s=0.5)
    response = run_harness_sync(_request(), settings)
    assert response.error is not None and response.error.kind == "timeout"
    assert "build phase did not finish" in response.error.message
    assert "build_timeout_s" in response.error.fix and "never ends" not in response.error.fix
