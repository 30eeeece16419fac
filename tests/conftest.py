"""Shared test configuration: the `gpu` marker skips tests when no usable NVIDIA GPU is present;
`postgres_server` is a real PostgreSQL server for the session (skipped without its binaries);
`openai_server` a scripted OpenAI-compatible HTTP server (bench/openai_server.py)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.openai_server import OpenAITestServer
from tests.postgres_server import PostgresServer, find_bindir

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _gpu_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


HAS_GPU = _gpu_available()
HAS_NVCC = shutil.which("nvcc") is not None


def pytest_configure(config):
    # Ctrl-C as at a terminal. A non-interactive shell's background job starts with SIGINT
    # ignored, which Python keeps and every process started from here inherits: the tests
    # that send it (to this process, or to the CLI they start) would wait out their timeouts.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with a driver")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc on PATH")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not HAS_NVCC:
            item.add_marker(skip_nvcc)


NO_POSTGRES = (
    "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin: "
    "install Debian's `postgresql` package (apt-get install postgresql) to run the team-KB tests"
)


@pytest.fixture(scope="session")
def postgres_server():
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(NO_POSTGRES)
    server = PostgresServer(bindir).init()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def openai_server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as server:
        yield server
