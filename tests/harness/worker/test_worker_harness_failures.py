"""A failure of the harness's own code, or of the worker while compute-sanitizer runs, is an
error of the run with its fix, never a verdict on the kernel (issue 42): the real worker
answers a Python exception that escapes where no candidate code ran as `internal`, with the
traceback; one that escapes once the candidate is loaded still ends the worker (its code may
be what raised: a crash, as always); and a worker that dies or overruns while the sanitizer
runs is `sanitizer_failed`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_failures import WorkerFailed, worker_error
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.settings import Settings

HERE = Path(__file__).resolve().parents[1]
SOFTMAX = HERE.parents[1] / "examples" / "softmax.cu"


def answer(tmp_path: Path, where: str, task: str):
    settings = Settings(
        worker_command=[sys.executable, str(HERE / "raising_worker.py"), where],
        cache_dir=str(tmp_path / "cache"),
        arch="sm_90",
    )
    request = WorkerRequest(task=task, source=str(SOFTMAX), settings=settings)
    return run_harness_sync(request, settings)


def test_a_traceback_of_the_harness_is_its_own_error_not_the_kernels(tmp_path):
    response = answer(tmp_path, "build", "build")
    error = response.error
    assert error is not None and error.kind == "internal"
    assert error.message == (
        "KernelBlaster's harness failed during build: RuntimeError: a bug in the harness's "
        "build step. Your kernel was not judged by this."
    )
    assert "report it with the log" in error.fix
    assert error.log.startswith("Traceback (most recent call last):")
    assert "raising_worker.py" in error.log


@pytest.mark.nvcc
def test_an_exception_once_the_candidate_is_loaded_still_ends_the_worker(tmp_path):
    """Past the candidate's load its code runs in the worker: an exception escaping there may
    be the candidate's, so the worker dies as it always did (a crash of the run)."""
    response = answer(tmp_path, "check", "check")
    error = response.error
    assert error is not None and error.kind == "crash"
    assert "exit 1" in error.message and "a bug in the harness's check step" in error.log


@pytest.mark.nvcc
def test_a_missing_dependency_is_an_install_problem_wherever_it_is_met(tmp_path):
    """A module of ours that is not installed (ncu_report on a fresh machine, met by the check's
    imports after the candidate was loaded) is named with its install command: no candidate
    can make our import statements fail, so it is never the kernel's crash."""
    response = answer(tmp_path, "missing-module", "check")
    error = response.error
    assert error is not None and error.kind == "dependency_missing"
    assert error.message == (
        f"The Python module `ncu_report` that KernelBlaster needs is not installed in "
        f"{sys.executable}: nothing was judged."
    )
    assert error.fix.startswith(f"Install it there: `{sys.executable} -m pip install 'ncu-report'`")


@pytest.mark.parametrize(
    ("timed_out", "exit_status", "said"),
    [(False, "exit 1", "died (exit 1)"), (True, None, "ran past its time")],
)
def test_a_worker_lost_while_the_sanitizer_runs_is_no_verdict(timed_out, exit_status, said):
    failure = WorkerFailed(
        "the worker exited without a result",
        log="Traceback (most recent call last):\nFileNotFoundError: work/sanitize-x",
        timed_out=timed_out,
        phase="sanitize",
        exit_status=exit_status,
    )
    error = worker_error(failure, Settings())
    assert error.kind == "sanitizer_failed"
    assert error.message == (
        f"The worker {said} while compute-sanitizer checked the kernel: the memory check has "
        "no verdict."
    )
    assert "FileNotFoundError" in error.log
    # elsewhere, a worker's death is still the run's crash
    verify = worker_error(
        WorkerFailed("died", phase="verify", exit_status="killed by SIGSEGV"), Settings()
    )
    assert verify.kind == "crash"
