"""Nothing the CLI starts outlives it: a build timeout, SIGTERM, SIGINT or SIGKILL of the CLI
leaves no worker, nvcc or cicc behind (they used to run on under PID 1 for minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from process_leaks import compilers_running, none_left, slow_nvcc, wait_for


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
