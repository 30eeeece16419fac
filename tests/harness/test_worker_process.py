"""The synchronous worker client (CLI, optimize loop, benches) against fake workers: real
processes that speak the protocol, so no GPU is needed."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import msgspec

from kernelblaster.harness import worker_process
from kernelblaster.harness.records import WorkerRequest
from kernelblaster.harness.worker_process import run_harness_sync
from kernelblaster.settings import Settings

# A worker that leaves a grandchild holding its stdout and stderr, as torch.compile's compile
# pool or a hung standalone program can: the client must neither wait for it nor leave it.
_LEAVES_A_CHILD = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
sys.stdin.read()
print('{"type": "progress", "phase": "verify", "message": "verifying"}', flush=True)
"""


def _fake_worker(tmp_path: Path, tail: str) -> tuple[Settings, Path]:
    script = tmp_path / "worker.py"
    script.write_text(_LEAVES_A_CHILD + textwrap.dedent(tail))
    pid_file = tmp_path / "child.pid"
    settings = Settings(
        worker_command=[sys.executable, str(script), str(pid_file)], run_timeout_s=1.0
    )
    return settings, pid_file


def _request() -> WorkerRequest:
    return WorkerRequest(task="check", source="k.cu", settings={})


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    # a killed child of an exited parent may linger as a zombie until init reaps it
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def _wait_dead(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_an_answer_returns_at_once_though_a_child_holds_the_pipe(tmp_path):
    settings, pid_file = _fake_worker(
        tmp_path,
        """
        print('{"type": "result", "error": {"kind": "no_reference", "message": "m", "fix": "f"}}',
              flush=True)
        """,
    )
    progress = []
    started = time.monotonic()
    response = run_harness_sync(_request(), settings, on_progress=progress.append)
    assert time.monotonic() - started < 20  # not the child's 60 s
    assert response.error is not None and response.error.kind == "no_reference"
    assert [p.phase for p in progress] == ["verify"]
    assert _wait_dead(int(pid_file.read_text()))


def test_a_hung_worker_is_killed_with_its_children(tmp_path):
    settings, pid_file = _fake_worker(tmp_path, "time.sleep(60)\n")
    started = time.monotonic()
    response = run_harness_sync(_request(), settings)
    assert time.monotonic() - started < 20
    assert response.error is not None and response.error.kind == "timeout"
    assert "verify phase did not finish within 1 s" in response.error.message
    assert _wait_dead(int(pid_file.read_text()))


def test_a_worker_that_dies_without_answering_is_a_crash(tmp_path):
    settings, _ = _fake_worker(tmp_path, "sys.stderr.write('boom: segfault'); os._exit(3)\n")
    response = run_harness_sync(_request(), settings)
    assert response.error is not None and response.error.kind == "crash"
    assert "died during verify (exit 3)" in response.error.message
    assert "boom: segfault" in response.error.log


def test_requests_are_sent_as_json(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(
        "import json, sys\n"
        "request = json.loads(sys.stdin.read())\n"
        "print(json.dumps({'type': 'result', 'error': {'kind': 'bad_target', "
        "'message': request['source'], 'fix': ''}}))\n"
    )
    settings = Settings(worker_command=[sys.executable, str(script)])
    response = run_harness_sync(_request(), settings)
    assert response.error is not None and response.error.message == "k.cu"
    assert msgspec.json.decode(msgspec.json.encode(_request()))["task"] == "check"


def test_a_worker_stuck_compiling_is_told_to_raise_the_build_budget(tmp_path, monkeypatch):
    # A 5 MB source that compiles past the budget is not "a kernel that never ends".
    monkeypatch.setattr(worker_process, "_REPORT_GRACE_S", 0.2)
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
