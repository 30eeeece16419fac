"""Nothing the CLI starts outlives it: a build timeout, SIGTERM, SIGINT or SIGKILL of the CLI
leaves no worker, nvcc or cicc behind (they used to run on under PID 1 for minutes), nor a
spare worker of `optimize`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.logging_worker import events
from tests.process_leaks import compilers_running, none_left, slow_nvcc, wait_for
from tests.tests_paths import EXAMPLES

TESTS = Path(__file__).resolve().parent


def _cli(tmp_path: Path, build_timeout_s: float) -> subprocess.Popen:
    source = tmp_path / "kernel.cu"
    source.write_text("__global__ void k(float* y) { y[0] = 1.0f; }\n")
    env = {
        **os.environ,
        "KERNELBLASTER_NVCC": str(slow_nvcc(tmp_path)),
        "KERNELBLASTER_BUILD_TIMEOUT_S": str(build_timeout_s),
        "KERNELBLASTER_CACHE_DIR": str(tmp_path / "cache"),
    }
    command = [sys.executable, "-m", "kernelblaster", "build", str(source), "--arch", "sm_90"]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_a_build_timeout_kills_the_whole_compiler(tmp_path):
    cli = _cli(tmp_path, build_timeout_s=2)
    output, _ = cli.communicate(timeout=60)
    assert cli.returncode == 1
    assert "nvcc did not finish within 2 s" in output
    assert "Raise the `build_timeout_s` setting" in output
    assert none_left(tmp_path, timeout=2) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signalled_cli_leaves_nothing_running(tmp_path, signum):
    cli = _cli(tmp_path, build_timeout_s=600)
    assert wait_for(lambda: compilers_running(tmp_path)), "the fake compile never started"
    cli.send_signal(signum)
    cli.communicate(timeout=30)
    assert cli.returncode != 0
    assert none_left(tmp_path) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_a_signalled_optimize_leaves_no_worker_and_no_spare(tmp_path, signum):
    """`optimize` on two GPUs keeps a spare worker per GPU; stopped while the original is
    profiled (the logging worker never answers), it leaves neither that worker nor a spare."""
    for file in ("softmax.cu", "softmax.py"):
        shutil.copy(EXAMPLES / file, tmp_path / file)
    worker = [sys.executable, str(TESTS / "logging_worker.py"), str(tmp_path / "log"), "hang"]
    (tmp_path / "kernelblaster.toml").write_text(
        f"worker_command = {json.dumps(worker)}\ngpu_index = [0, 1]\n"
        f"cache_dir = {json.dumps(str(tmp_path / 'cache'))}\n"
    )
    env = {
        **os.environ,
        "KERNELBLASTER_LLM_BASE_URL": "http://127.0.0.1:9/v1",  # never reached: stopped before
        "KERNELBLASTER_KB": str(tmp_path / "kb.sqlite3"),
    }
    command = [sys.executable, "-m", "kernelblaster", "--trust", "optimize", "softmax.cu"]
    cli = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)

    def profiling_with_both_spares() -> bool:
        logged = events(tmp_path / "log")
        prewarmed = {e["prewarm"] for e in logged if e["event"] == "started"}
        return {"0", "1"} <= prewarmed and any(e["event"] == "request" for e in logged)

    assert wait_for(profiling_with_both_spares), "the original's profile never started"
    cli.send_signal(signum)
    cli.communicate(timeout=30)
    assert cli.returncode != 0
    assert none_left(tmp_path) == []
