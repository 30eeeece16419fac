"""Child processes that leave nothing behind. A worker leads its own process group and all it starts
(nvcc, ncu and its program, compute-sanitizer) stays in it, so killing the group ends the whole
tree. `kill_tree` ends an overrunning tool with its descendants; `exit_with_parent` ends a worker
whose parent died without killing it."""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

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


class WorkerProcess(Protocol):
    """What the worker client uses of a worker process: an asyncio subprocess, or a worker
    forked by the zygote (harness/protocol/zygote_client.py: ForkedProcess)."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def stderr(self) -> asyncio.StreamReader | None: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...


def kill_worker(process: subprocess.Popen | WorkerProcess) -> None:
    """SIGKILL a worker and whatever it started: its process group, and any descendant that
    left the group."""
    kill_worker_pid(process.pid)


def kill_worker_pid(pid: int) -> None:
    """`kill_worker` for a worker known by its pid alone (one forked by the zygote before the
    client had its pipes)."""
    kill_tree(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_tool(
    command: list[str],
    *,
    timeout: float,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    merge_stderr: bool = True,
    on_output: Callable[[str], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a tool to completion. With `merge_stderr` its stdout holds both streams in the order
    written, and `on_output` hears it as the pipe delivers it. On timeout
    (subprocess.TimeoutExpired, with the output so far) or any interruption, the tool and all it
    started are killed before the exception leaves."""
    if on_output is not None and not merge_stderr:
        raise ValueError("run_tool: on_output hears the merged output only")
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=on_output is None,
        errors="replace" if on_output is None else None,
    )
    if on_output is not None:
        return _run_streaming(process, command, timeout, on_output)
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


def _run_streaming(
    process: subprocess.Popen[bytes],
    command: list[str],
    timeout: float,
    on_output: Callable[[str], None],
) -> subprocess.CompletedProcess[str]:
    """run_tool's wait for a tool whose output is heard as it comes (`on_output`)."""
    assert process.stdout is not None
    pipe = process.stdout
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces: list[str] = []

    def pump() -> None:
        # os.read returns what the pipe holds now: a progress line is heard before its end
        while chunk := os.read(pipe.fileno(), 65536):
            if text := decoder.decode(chunk):
                pieces.append(text)
                on_output(text)
        if tail := decoder.decode(b"", final=True):
            pieces.append(tail)
            on_output(tail)

    reader = threading.Thread(target=pump, name="tool output", daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        kill_tree(process.pid)
        process.wait()
        reader.join()
        raise subprocess.TimeoutExpired(command, timeout, output="".join(pieces)) from exc
    except BaseException:
        kill_tree(process.pid)
        raise
    finally:
        process.wait()
        reader.join()  # the pipe's last bytes read: the output is whole
        pipe.close()
    return subprocess.CompletedProcess(command, process.returncode, "".join(pieces), None)


def exit_with_parent() -> None:
    """In a worker: end the worker's own group (itself included) when its parent goes away without
    killing it, or on SIGTERM, so an editor or CLI that dies abruptly leaves nothing running."""
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
