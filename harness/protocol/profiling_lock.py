"""One GPU profile at a time across processes: an flock that ncu runs and the in-process counters
hold, since a second profile fails in the driver even on another GPU of the host. It lives in the
user's cache, not `cache_dir`, as projects with their own caches share the GPU."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs

from kernelblaster.folders import made_folder
from kernelblaster.harness.protocol.records import HarnessError

# Only XDG_CACHE_HOME moves the lock; `cache_dir` does not.
_LOCK_FIX = "Set XDG_CACHE_HOME to a folder you can write (the profiling lock is per user)"


def lock_dir() -> Path:
    """The user's folder for machine-wide profiling state: this lock, and ncu's own lock file
    (ncu.run_ncu points its TMPDIR here)."""
    directory = Path(platformdirs.user_cache_dir("kernelblaster")) / "gpu-profiling"
    return made_folder(directory, fix=_LOCK_FIX)


@contextmanager
def one_profile_at_a_time(progress: Callable[..., None] | None = None) -> Iterator[None]:
    """Hold the profiling lock for the body; `progress` (phase, message) hears of a wait for
    another profile."""
    path = lock_dir() / "profile.lock"
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if progress is not None:
                progress(
                    "profile",
                    f"waiting for another profile to end ({holder}): the GPU's counters serve "
                    "one profile at a time",
                )
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def profiler_busy(message: str, log: str) -> HarnessError:
    """The driver's refusal to profile while something else held the counters."""
    return HarnessError(
        kind="profiler_busy",
        message=f"{message}: another profiler held the GPU's performance counters (Nsight "
        "Compute or Nsight Systems, DCGM's profiling metrics, or another user's KernelBlaster).",
        fix="Save again once that profile has ended. On a machine that DCGM monitors, pause "
        "its profiling metrics while you work (`dcgmi profile --pause`, `--resume` after). "
        "KernelBlaster's own profiles take turns and never meet this.",
        log=log,
    )
