"""A slow fake nvcc for process-leak tests, and a way to find what it left running.

The fake answers `--version` like nvcc and otherwise starts a "cicc" child and waits for it,
as the real driver does, so a test can see whether a whole compiler tree outlives whoever was
meant to end it. Every process of the tree carries the test's own folder on its command
line, which is how `leftovers` finds them, whatever their parent or process group.

A process is known here by its command line, which the kernel sets a moment after the exec that
lets its starter go (Popen and asyncio's subprocesses return once the exec has begun): one
caught in between shows none, and matches nothing. `started_settled` waits that moment out for
every process the test started, so that one just started is seen at once."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import psutil

_FAKE_NVCC = """#!{python}
import subprocess, sys, time
if sys.argv[1:] == ["--version"]:
    print("Cuda compilation tools, release 13.0, V13.0.0 (slow fake for {marker})")
    sys.exit(0)
cicc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3000)", "cicc", "{marker}"])
cicc.wait()
"""


def slow_nvcc(folder: Path) -> Path:
    """An executable fake nvcc in `folder` whose compiles never end."""
    nvcc = folder / "slow-nvcc"
    nvcc.write_text(_FAKE_NVCC.format(python=sys.executable, marker=folder))
    nvcc.chmod(0o755)
    return nvcc


def leftovers(folder: Path) -> list[psutil.Process]:
    """Live processes (not this test's) whose command line names `folder`, those just started
    included (`started_settled`)."""
    started_settled()
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(str(folder) in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


def compilers_running(folder: Path) -> bool:
    """Whether a fake cicc from `folder` is running (a compile is under way)."""
    return any("cicc" in (p.info["cmdline"] or []) for p in leftovers(folder))


def wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def started_settled(timeout: float = 5.0) -> None:
    """Waits until every process below this one shows its command line (and its environment,
    which the kernel sets with it): a process caught inside its exec shows neither yet."""
    wait_for(lambda: not _inside_exec(), timeout)


def _inside_exec() -> list[psutil.Process]:
    """This process's descendants alive with no command line yet (a zombie has none either)."""
    caught = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # ended meanwhile
            if not process.cmdline() and process.status() != psutil.STATUS_ZOMBIE:
                caught.append(process)
    return caught


def none_left(folder: Path, timeout: float = 5.0) -> list[str]:
    """Waits up to `timeout` for every process of `folder` to end; the command lines of those
    still alive (an empty list is a pass)."""
    wait_for(lambda: not leftovers(folder), timeout)
    return [" ".join(p.info["cmdline"]) for p in leftovers(folder)]
