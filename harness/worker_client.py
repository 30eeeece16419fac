"""The one worker client: start a worker process, send one JSON request on stdin, read JSON
lines back (progress…, result), and kill the worker's whole tree on timeout or cancellation.

Generic over the two worker protocols (harness and optimize): the caller passes the decoder of
the protocol's message union and the result type. asyncio at the core, so the language
server's event loop keeps answering while a worker runs; `run_worker_sync` is the same for
synchronous callers (the CLI, the optimize loop, benches). `timeout_s` is either one budget for
the whole run or a function of the last progress message (the harness worker's phases have
budgets of their own). Torch-free: every process kind imports it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from kernelblaster.harness.processes import kill_worker, worker_environment

Result = TypeVar("Result")

# A full-depth profile of a file with many kernels is one long JSON line.
_LINE_LIMIT = 64 * 1024 * 1024
_STDERR_TAIL_LINES = 30


class WorkerFailed(Exception):
    """The worker could not be started, broke the protocol, timed out, or died without a
    result. `log` is the tail of its stderr; `phase` the last progress message's, if any."""

    def __init__(
        self,
        message: str,
        *,
        log: str = "",
        timed_out: bool = False,
        phase: str | None = None,
        exit_status: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.log = log
        self.timed_out = timed_out
        self.phase = phase
        self.exit_status = exit_status  # "exit 3", "killed by SIGSEGV"


# A budget: seconds for the whole run (None: unbounded), or seconds from each progress message
# (None before the first) to the next message.
Budget = float | None | Callable[[Any | None], float | None]


async def _spawn(
    command: list[str], cwd: Path | None, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=worker_environment(env),
            limit=_LINE_LIMIT,
            start_new_session=True,  # its own process group, killed as one
        )
    except OSError as exc:
        raise WorkerFailed(
            f"cannot start the worker {' '.join(command)!r}: {exc}; check the "
            "kernelblaster.workerCommand / optimizeWorkerCommand settings"
        ) from exc


class SpareWorkers:
    """One started worker per command, waiting for its request. A harness worker spends
    seconds before its first useful instruction (Python start-up, importing torch, creating the
    CUDA context); with KERNELBLASTER_PREWARM=<gpu index> set it does all that while it waits,
    on the GPU the job will use, so the next save skips it. A spare that died meanwhile is
    replaced, never used."""

    def __init__(self) -> None:
        self._spares: dict[tuple[int, tuple[str, ...]], asyncio.subprocess.Process] = {}

    async def take(self, command: list[str], gpu_index: int = 0) -> asyncio.subprocess.Process:
        key = (gpu_index, tuple(command))
        spare = self._spares.pop(key, None)
        if spare is None or spare.returncode is not None:
            spare = await self._start(command, gpu_index)
        self._spares[key] = await self._start(command, gpu_index)
        return spare

    async def _start(self, command: list[str], gpu_index: int) -> asyncio.subprocess.Process:
        return await _spawn(command, None, {"KERNELBLASTER_PREWARM": str(gpu_index)})

    async def close(self) -> None:
        spares = list(self._spares.values())
        self._spares.clear()
        for spare in spares:
            kill_worker(spare)
            await spare.wait()


async def run_worker(
    command: list[str],
    request: msgspec.Struct,
    decoder: msgspec.json.Decoder,
    result_type: type[Result],
    on_progress: Callable[[Any], None],
    *,
    timeout_s: Budget,
    cwd: Path | None = None,
    spares: SpareWorkers | None = None,
    gpu_index: int = 0,
) -> Result:
    """Run `request` in a worker: a spare one when `spares` is given (its working directory is
    the server's; workers take every path from the request), else a fresh one in `cwd`."""
    process = await (
        spares.take(command, gpu_index) if spares is not None else _spawn(command, cwd)
    )
    budget = timeout_s if callable(timeout_s) else (lambda _message: timeout_s)
    stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
    stderr_reader = asyncio.create_task(_collect(process.stderr, stderr_tail))
    reaper = asyncio.create_task(_kill_leftovers_on_exit(process))
    result: Result | None = None
    last: Any = None
    try:
        async with asyncio.timeout(_deadline(budget(None))) as deadline:
            await _send(process, msgspec.json.encode(request))
            assert process.stdout is not None
            while line := await process.stdout.readline():
                if not line.strip():
                    continue
                try:
                    message = decoder.decode(line)
                except msgspec.DecodeError as exc:
                    raise WorkerFailed(
                        f"the worker wrote a line that is not its protocol ({exc}): {line[:200]!r}",
                        log="".join(stderr_tail),
                        phase=getattr(last, "phase", None),
                    ) from exc
                if isinstance(message, result_type):
                    result = message
                else:
                    last = message
                    deadline.reschedule(_deadline(budget(message)))
                    on_progress(message)
            returncode = await process.wait()
    except TimeoutError as exc:
        seconds = budget(last)
        raise WorkerFailed(
            f"the worker ran longer than {seconds:.0f} s and was stopped",
            log="".join(stderr_tail),
            timed_out=True,
            phase=getattr(last, "phase", None),
        ) from exc
    finally:
        # Also after a normal exit: whatever the worker left running in its group goes too.
        reaper.cancel()
        kill_worker(process)
        await process.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stderr_reader, timeout=1.0)
    if result is None:
        raise WorkerFailed(
            f"the worker exited ({describe_exit(returncode)}) without a result",
            log="".join(stderr_tail),
            phase=getattr(last, "phase", None),
            exit_status=describe_exit(returncode),
        )
    return result


def run_worker_sync(*args: Any, **kwargs: Any) -> Any:
    """`run_worker` for callers without an event loop (the CLI, the optimize loop)."""
    return asyncio.run(run_worker(*args, **kwargs))


def _deadline(seconds: float | None) -> float | None:
    return None if seconds is None else asyncio.get_running_loop().time() + seconds


async def _send(process: asyncio.subprocess.Process, payload: bytes) -> None:
    assert process.stdin is not None
    # A worker that dies at once closes its stdin; that shows up below as "no result".
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(payload)
        await process.stdin.drain()
        process.stdin.close()


async def _collect(stream: asyncio.StreamReader | None, tail: collections.deque[str]) -> None:
    if stream is None:
        return
    while line := await stream.readline():
        tail.append(line.decode("utf-8", errors="replace"))


async def _kill_leftovers_on_exit(process: asyncio.subprocess.Process) -> None:
    """Once the worker itself has exited, end what it left in its group (a compile pool, a
    program it ran): those would hold its stdout open, and a crash would be read as a hang.
    Polls `returncode`, which the child watcher sets on exit whatever the pipes do."""
    while process.returncode is None:
        await asyncio.sleep(0.1)
    kill_worker(process)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"
