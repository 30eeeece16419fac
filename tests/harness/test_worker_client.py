"""The server's asyncio worker client against fake workers that leave a child behind holding
their pipes, as torch.compile's compile pool or a hung standalone program can."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.records import WorkerMessage, WorkerRequest, WorkerResponse
from kernelblaster.harness.worker_client import WorkerFailed, run_worker

LEAVES_A_CHILD = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
sys.stdin.read()
"""


async def _run(tmp_path: Path, tail: str) -> tuple[WorkerResponse, float, int]:
    script = tmp_path / "worker.py"
    script.write_text(LEAVES_A_CHILD + tail)
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    try:
        response = await run_worker(
            [sys.executable, str(script), str(pid_file)],
            WorkerRequest(task="build", source="/nonexistent.cu"),
            msgspec.json.Decoder(WorkerMessage),
            WorkerResponse,
            lambda _: None,
            timeout_s=30,
        )
    finally:
        seconds = time.monotonic() - started
    return response, seconds, int(pid_file.read_text())


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 5
    while stat.exists() and stat.read_text().split(") ")[1][0] != "Z":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def test_an_answer_is_not_held_up_by_a_leftover_child(tmp_path):
    response, seconds, child = await _run(
        tmp_path,
        'print(\'{"type": "result", "error": {"kind": "no_reference", "message": "m"}}\')\n',
    )
    assert response.error.kind == "no_reference"
    assert seconds < 10 and _gone(child)


async def test_a_crash_is_reported_at_once_not_as_a_timeout(tmp_path):
    script_tail = "sys.stderr.write('boom: segfault\\n'); sys.stderr.flush(); os._exit(3)\n"
    started = time.monotonic()
    with pytest.raises(WorkerFailed) as failed:
        await _run(tmp_path, script_tail)
    assert time.monotonic() - started < 10  # not the 30 s timeout, nor the child's 60 s
    assert not failed.value.timed_out
    assert "exited" in str(failed.value) and "without a result" in str(failed.value)
    assert "boom: segfault" in failed.value.log
    assert _gone(int((tmp_path / "child.pid").read_text()))
