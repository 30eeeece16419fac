"""The real worker in an interpreter without PyTorch, as `pip install kernelblaster` leaves it:
it builds the kernel, then reports a `torch_missing` setup error naming that interpreter and
how to install torch into it, instead of dying with an ImportError ("worker exited (exit code
1) without a result"). The spare worker's prewarm must not die on it either."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import Settings

REPO = Path(__file__).resolve().parents[3]
SOFTMAX = REPO / "examples" / "softmax.cu"

_TORCH_PACKAGES = ("torch", "functorch", "torchgen")


@pytest.fixture(scope="module")
def python_without_torch(tmp_path_factory) -> Path:
    """A venv whose site-packages holds everything this one has (kernelblaster included) except
    PyTorch: links, not copies, so it costs a second instead of an install."""
    root = tmp_path_factory.mktemp("no-torch")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if entry.name.split("-")[0].split(".")[0] not in _TORCH_PACKAGES:
            (site / entry.name).symlink_to(entry)
    probe = subprocess.run(
        [str(python), "-c", "import kernelblaster.harness.worker.serve, torch"],
        capture_output=True,
        text=True,
    )
    assert "No module named 'torch'" in probe.stderr, probe.stderr
    return python


def _request(tmp_path: Path) -> WorkerRequest:
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    return WorkerRequest(task="check", source=str(SOFTMAX), settings=settings)


def _assert_torch_missing(response: WorkerResponse, python: Path) -> None:
    assert response.error is not None, response
    assert response.error.kind == "torch_missing"
    assert f"PyTorch is not installed in {python}" in response.error.message
    assert f"`{python} -m pip install torch`" in response.error.fix


def _run_worker(python: Path, request: WorkerRequest, env: dict[str, str]) -> WorkerResponse:
    done = subprocess.run(
        # -P: the package installed in that interpreter, as a user runs it, not this checkout
        [str(python), "-P", "-m", "kernelblaster.harness.worker"],
        input=msgspec.json.encode(request),
        capture_output=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    last = done.stdout.decode().strip().splitlines()[-1]
    return msgspec.json.decode(last, type=WorkerResponse)


@pytest.mark.nvcc
def test_the_kernel_is_built_then_torch_is_reported_missing(python_without_torch, tmp_path):
    response = _run_worker(python_without_torch, _request(tmp_path), {})
    _assert_torch_missing(response, python_without_torch)
    assert response.build is not None and response.build.ok
    assert {r.demangled.split("(")[0] for r in response.build.resources} == {"softmax_rowthread"}


@pytest.mark.nvcc
def test_a_prewarmed_spare_worker_reports_torch_missing(python_without_torch, tmp_path):
    response = _run_worker(python_without_torch, _request(tmp_path), {"KERNELBLASTER_PREWARM": "0"})
    _assert_torch_missing(response, python_without_torch)
