"""Child processes that leave nothing behind.

The rule: a worker leads its own process group (its clients start it with
`start_new_session`), and everything it starts — nvcc and the cicc/ptxas/gcc it runs, ncu and
the program it profiles, compute-sanitizer, a standalone program — stays in that group. So
killing the worker's group ends the whole tree at once, whoever kills it: a cancel, a newer
save, a timeout, the server's shutdown. A tool that overruns its own timeout inside the worker
is ended with its descendants (`kill_tree`), and a worker whose parent dies without killing it
(the CLI taking a SIGKILL) ends its own group (`exit_with_parent`).

Torch-free: the CLI, the server and the workers all import this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    import asyncio

_PARENT_POLL_S = 0.5
PARENT_ENV = "KERNELBLASTER_PARENT_PID"  # set by worker clients for exit_with_parent


def worker_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker is started with: ours, its parent's pid, and `extra`."""
    return {**os.environ, PARENT_ENV: str(os.getpid()), **(extra or {})}


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process below it, wherever their process groups are. The
    descendants are listed first: once `pid` is dead they would be re-parented and lost."""
    try:
        root = psutil.Process(pid)
        doomed = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in doomed:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.kill()


def kill_worker(process: subprocess.Popen | asyncio.subprocess.Process) -> None:
    """SIGKILL a worker and whatever it started: its process group, and any descendant that
    left the group."""
    kill_tree(process.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run_tool(
    command: list[str],
    *,
    timeout: float,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    merge_stderr: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a tool to completion. With `merge_stderr`, its stdout holds stdout and stderr in the
    order the tool wrote them. On timeout (subprocess.TimeoutExpired, with the output so far)
    or any interruption, the tool and everything it started are killed before the exception
    leaves."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        errors="replace",
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        kill_tree(process.pid)
        stdout, stderr = process.communicate()
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr) from exc
    except BaseException:
        kill_tree(process.pid)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def exit_with_parent() -> None:
    """In a worker: when the process that started it goes away without killing it, or it is
    sent SIGTERM, end the worker's own group (itself included), so an editor or CLI that dies
    abruptly leaves no compiler or kernel running."""
    # The client names itself: a parent that died before this line ran is already gone.
    parent = int(os.environ.get(PARENT_ENV, os.getppid()))

    def end_group(*_: object) -> None:
        if os.getpgrp() == os.getpid():  # only a group this worker leads is its to end
            os.killpg(os.getpid(), signal.SIGKILL)
        kill_tree(os.getpid())

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(_PARENT_POLL_S)
        end_group()

    signal.signal(signal.SIGTERM, end_group)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
