"""The one worker client: start a worker, send one JSON request, read progress lines and a result,
and kill the worker's whole tree on timeout or cancellation.

`run_worker` is the asyncio core of both worker protocols; `run_harness` adds the harness
worker's phase budgets, `run_harness_sync` serves callers without an event loop. Spare workers
hide a worker's start-up (seconds: Python, torch, the CUDA context) by starting it early."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from kernelblaster.harness.protocol.cuda_errors import device_fault
from kernelblaster.harness.protocol.processes import (
    WorkerProcess,
    kill_worker,
    worker_environment,
)
from kernelblaster.harness.protocol.worker_failures import (
    WorkerFailed,
    phase_timeout_s,
    worker_error,
)
from kernelblaster.harness.protocol.worker_protocol import (
    GPU_FREE_FD_ENV,
    WorkerMessage,
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
    expected_request_env,
)
from kernelblaster.harness.protocol.zygote_client import ForkedProcess, Zygote
from kernelblaster.settings import Settings

_log = logging.getLogger(__name__)

Result = TypeVar("Result")

# A full-depth profile of a file with many kernels is one long JSON line.
_LINE_LIMIT = 64 * 1024 * 1024
_STDERR_TAIL_LINES = 30


# A budget: seconds for the whole run (None: unbounded), or seconds from each progress message
# (None before the first) to the next message.
Budget = float | None | Callable[[Any | None], float | None]


async def _spawn(
    command: list[str],
    cwd: Path | None,
    env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
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
            pass_fds=pass_fds,
        )
    except OSError as exc:
        raise WorkerFailed(
            f"cannot start the worker {' '.join(command)!r}: {exc}; check the "
            "kernelblaster.workerCommand / optimizeWorkerCommand settings"
        ) from exc


# How long a spare takes to be ready: Python, the torch import, the CUDA context (~3-4 s on an
# H100 or H200 host), then its reference side. Sizes the pool whatever kind its spares are.
WARM_UP_S = 4.0
# The same for a spare forked by the zygote (CUDA context ~0.15 s on an H100, reference sides
# ~0.3-1 s): an estimate until an H100 run's `ahead_at_*` marks say otherwise.
FORKED_WARM_UP_S = 2.0
# Forked spares that die before any request have run no candidate code, so this many deaths mean
# forking is broken on this host: spares are then started by exec.
FORKED_DEATHS_TO_GIVE_UP = 2


@dataclasses.dataclass(eq=False)
class _Spare:
    process: WorkerProcess
    hint: dict[str, str]
    started: float = dataclasses.field(default_factory=time.monotonic)

    def young(self, now: float) -> bool:
        """Still warming up, likely: taken now, its request would wait for it."""
        forked = isinstance(self.process, ForkedProcess)
        return now - self.started < (FORKED_WARM_UP_S if forked else WARM_UP_S)


class SpareWorkers:
    """Started workers per (GPU, command), waiting for their requests; with KERNELBLASTER_PREWARM
    they import torch and make the CUDA context meanwhile. A dead spare is replaced, never used.
    Used from one event loop.

    How many: `least` while requests are rare, else as many as were taken in the last WARM_UP_S,
    at most `most`. A request takes a warm spare that expects it, else the oldest. A spare
    started beside a running worker touches the GPU only once that worker exits or it is taken."""

    def __init__(self, *, prewarm: bool = True, least: int = 1, most: int = 1) -> None:
        self._least = least if prewarm else 1
        self._most = max(most, self._least) if prewarm else 1
        self._spares: dict[tuple[int, tuple[str, ...]], list[_Spare]] = {}
        self._taken: dict[tuple[int, tuple[str, ...]], collections.deque[float]] = {}
        self._closed = False
        self._prewarm = prewarm
        # spare pid -> (the write end of its pipe, the pid of the worker it waits for)
        self._waiting: dict[int, tuple[int, int]] = {}
        self._zygote = Zygote()  # started with the first prewarming spare of the default worker
        self._retired: list[Zygote] = []  # started in an environment that has changed since
        self._forked_deaths: list[str] = []  # how each forked spare that died untaken ended

    async def take(
        self, command: list[str], gpu_index: int = 0, hint: dict[str, str] | None = None
    ) -> WorkerProcess:
        """A spare for `command` on `gpu_index` (a new worker if none is alive), free to use
        the GPU from now on; `hint`: the request's own (`ready`), to find a spare that expects
        it."""
        key = (gpu_index, tuple(command))
        now = time.monotonic()
        taken = self._taken.setdefault(key, collections.deque())
        taken.append(now)
        while taken and taken[0] < now - WARM_UP_S:
            taken.popleft()
        alive = self._live(key)
        if alive:
            chosen = min(
                alive,
                key=lambda spare: (
                    spare.young(now),
                    spare.hint != (hint or {}),
                    spare.started,
                ),
            )
            alive.remove(chosen)
            process = chosen.process
            # Which spare a save got often explains a slow save (the editing-rhythm bench reads
            # this line from the server's log).
            _log.info(
                "spare worker %d taken on GPU %d: %.1f s old, %s, %s; %d left; load average %.1f",
                process.pid,
                gpu_index,
                now - chosen.started,
                _started_by(process, self._prewarm),
                "expects this request" if chosen.hint == (hint or {}) else "expects another",
                len(alive),
                os.getloadavg()[0],
            )
        else:
            process = await self._start(command, gpu_index)
            _log.info(
                "no spare worker alive on GPU %d: one started for the request; load average %.1f",
                gpu_index,
                os.getloadavg()[0],
            )
        self._let_go(process.pid)
        return process

    def wanted(self, command: list[str], gpu_index: int = 0) -> int:
        """How many spares to keep for `command` on `gpu_index`: the requests taken in the
        last WARM_UP_S, at least `least`, at most `most`."""
        recent = self._taken.get((gpu_index, tuple(command)), ())
        now = time.monotonic()
        taken = sum(1 for at in recent if at >= now - WARM_UP_S)
        return max(self._least, min(self._most, taken))

    def short(self, command: list[str], gpu_index: int = 0) -> bool:
        """Whether fewer spares are left than will be wanted before the request just taken ends: the
        next should start now."""
        left = len(self._live((gpu_index, tuple(command))))
        return left < self.wanted(command, gpu_index) - 1

    async def ready(
        self,
        command: list[str],
        gpu_index: int = 0,
        hint: dict[str, str] | None = None,
        *,
        after: WorkerProcess | None = None,
    ) -> None:
        """Have `wanted` live spares wait for `command` on `gpu_index`. `hint`: environment telling
        a prewarming spare its likely request; `after`: a running worker whose exit the spare waits
        for before it touches the GPU."""
        key = (gpu_index, tuple(command))
        while not self._closed and len(self._live(key)) < self.wanted(command, gpu_index):
            started = await self._start(command, gpu_index, hint, after)
            # Enough spares already (another request's, on the same GPU), or closed meanwhile:
            # a spare that is nobody's would never be killed.
            if self._closed or len(self._live(key)) >= self.wanted(command, gpu_index):
                self._let_go(started.pid)
                kill_worker(started)
                await started.wait()  # reaped in this loop, which owns its transport
                return
            self._spares.setdefault(key, []).append(_Spare(started, hint or {}))

    def waiting(self) -> list[WorkerProcess]:
        """The spares alive now, of every GPU and command, oldest first."""
        spares = [spare for key in self._spares for spare in self._live(key)]
        return [spare.process for spare in sorted(spares, key=lambda spare: spare.started)]

    def released(self, worker: WorkerProcess) -> None:
        """`worker` has exited: the spares that wait for it may use the GPU."""
        for spare_pid, (_, waited_for) in list(self._waiting.items()):
            if waited_for == worker.pid:
                self._let_go(spare_pid)

    def _let_go(self, spare_pid: int) -> None:
        waiting = self._waiting.pop(spare_pid, None)
        if waiting is not None:
            os.close(waiting[0])  # the spare reads its pipe's end of file

    def _live(self, key: tuple[int, tuple[str, ...]]) -> list[_Spare]:
        """The key's spares still alive (the dead ones dropped, a forked one counted)."""
        spares = self._spares.get(key, [])
        for spare in spares:
            returncode = spare.process.returncode
            if returncode is not None and isinstance(spare.process, ForkedProcess):
                self._forked_died(spare.process.pid, returncode)
        spares[:] = [spare for spare in spares if spare.process.returncode is None]
        return spares

    def _forked_died(self, pid: int, returncode: int) -> None:
        self._forked_deaths.append(f"{pid}: {describe_exit(returncode)}")
        if len(self._forked_deaths) == FORKED_DEATHS_TO_GIVE_UP:
            _log.warning(
                "%d spare workers forked by the zygote died before any request (%s): spares "
                "are started by exec from now on",
                FORKED_DEATHS_TO_GIVE_UP,
                "; ".join(self._forked_deaths),
            )

    @property
    def forking(self) -> bool:
        """Whether spares of the default worker are forked by the zygote once it is ready
        (not after FORKED_DEATHS_TO_GIVE_UP of them died untaken)."""
        return len(self._forked_deaths) < FORKED_DEATHS_TO_GIVE_UP

    async def _start(
        self,
        command: list[str],
        gpu_index: int,
        hint: dict[str, str] | None = None,
        after: WorkerProcess | None = None,
    ) -> WorkerProcess:
        if not self._prewarm:
            return await _spawn(command, None)
        prewarm = {"KERNELBLASTER_PREWARM": str(gpu_index), **(hint or {})}
        if after is None or after.returncode is not None:
            return await self._launch(command, prewarm)
        read_end, write_end = os.pipe()
        try:
            spare = await self._launch(command, prewarm, gpu_free=read_end)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)  # the spare has its own copy
        self._waiting[spare.pid] = (write_end, after.pid)
        if after.returncode is not None:  # it exited while the spare started
            self._let_go(spare.pid)
        return spare

    def begin_zygote(self, command: list[str]) -> None:
        """Have the worker zygote import torch now, so the first spares of `command` are forked
        rather than exec'd; nothing for another command or for spares that do not prewarm."""
        if self._prewarm and command == default_harness_command():
            self._zygote.begin()

    async def _launch(
        self, command: list[str], env: dict[str, str], gpu_free: int | None = None
    ) -> WorkerProcess:
        """A prewarming worker with `env` added (and `gpu_free`, its GPU_FREE_FD_ENV pipe's read
        end): forked by the zygote for the default command once it is ready, else started by
        exec."""
        fds = {} if gpu_free is None else {GPU_FREE_FD_ENV: gpu_free}
        if command == default_harness_command() and self.forking:
            if self._zygote.outdated:  # a new one for the new environment; the old one's
                self._retired.append(self._zygote)  # workers live on until `close`
                self._zygote = Zygote()
            if not self._zygote.started:
                await self._zygote.start()
            if self._zygote.usable:
                try:
                    return await self._zygote.fork(worker_environment(env), fds, _LINE_LIMIT)
                except OSError as exc:
                    _log.warning("the worker zygote did not fork (%s): started by exec", exc)
        named = {name: str(fd) for name, fd in fds.items()}
        return await _spawn(command, None, {**env, **named}, pass_fds=tuple(fds.values()))

    async def close(self) -> None:
        self._closed = True
        spares = [spare.process for kept in self._spares.values() for spare in kept]
        self._spares.clear()
        for spare_pid in list(self._waiting):
            self._let_go(spare_pid)
        for spare in spares:
            kill_worker(spare)
            await spare.wait()
        for zygote in [*self._retired, self._zygote]:
            await zygote.close()


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
    spare_hint: dict[str, str] | None = None,
    spare_from: Callable[[Any], bool] = lambda _message: False,
    env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> Result:
    """Run `request` in a spare worker when `spares` is given, else in a fresh one in `cwd` with
    `env` and `pass_fds`. The next spare starts once a progress message satisfies `spare_from`,
    else when the run ends, so its torch import doesn't share the CPU with the kernel's timing;
    where requests outpace spares (`SpareWorkers.short`), with the run."""
    process = await (
        spares.take(command, gpu_index, spare_hint)
        if spares is not None
        else _spawn(command, cwd, env, pass_fds)
    )
    following: asyncio.Task[None] | None = None
    if spares is not None and spares.short(command, gpu_index):
        # Requests come faster than spares warm up: the next one starts now, not later.
        following = asyncio.create_task(spares.ready(command, gpu_index, spare_hint, after=process))

    def progressed(message: Any) -> None:
        nonlocal following
        if spares is not None and following is None and spare_from(message):
            following = asyncio.create_task(
                spares.ready(command, gpu_index, spare_hint, after=process)
            )
        on_progress(message)

    try:
        return await _exchange(process, request, decoder, result_type, progressed, timeout_s)
    finally:
        if spares is not None:
            spares.released(process)  # exited: _exchange has reaped it
            task = asyncio.current_task()
            if following is not None:
                await following
            elif not (task is not None and task.cancelling()):
                await spares.ready(command, gpu_index, spare_hint)


async def _exchange(
    process: WorkerProcess,
    request: msgspec.Struct,
    decoder: msgspec.json.Decoder,
    result_type: type[Result],
    on_progress: Callable[[Any], None],
    timeout_s: Budget,
) -> Result:
    """Send `request` to the started `process` and read its messages until its result."""
    budget = timeout_s if callable(timeout_s) else (lambda _message: timeout_s)
    stderr_tail = _StderrTail()
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
                        log=stderr_tail.text(),
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
            log=stderr_tail.text(),
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
            log=stderr_tail.text(),
            phase=getattr(last, "phase", None),
            exit_status=describe_exit(returncode),
        )
    return result


def _deadline(seconds: float | None) -> float | None:
    return None if seconds is None else asyncio.get_running_loop().time() + seconds


async def _send(process: WorkerProcess, payload: bytes) -> None:
    assert process.stdin is not None
    # A worker that dies at once closes its stdin; that shows up below as "no result".
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(payload)
        await process.stdin.drain()
        process.stdin.close()


class _StderrTail:
    """The worker's last stderr lines, and the first CUDA error naming a device fault: a
    process that aborts on one (c10 checks a free after it) prints its C++ stack after it."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        self.cuda_error: str | None = None

    def add(self, line: str) -> None:
        if self.cuda_error is None and device_fault(line, cuda_errors_only=True) is not None:
            self.cuda_error = line
        self.lines.append(line)

    def text(self) -> str:
        tail = "".join(self.lines)
        if self.cuda_error is not None and self.cuda_error not in self.lines:
            return f"{self.cuda_error}[...]\n{tail}"
        return tail


async def _collect(stream: asyncio.StreamReader | None, tail: _StderrTail) -> None:
    if stream is None:
        return
    while line := await stream.readline():
        tail.add(line.decode("utf-8", errors="replace"))


async def _kill_leftovers_on_exit(process: WorkerProcess) -> None:
    """Once the worker has exited, end what it left in its group: those would hold its stdout open,
    and a crash would read as a hang. Polls `returncode`, which is set on exit whatever the pipes
    do."""
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


# --- the harness worker ---------------------------------------------------------------------

_harness_decoder = msgspec.json.Decoder(WorkerMessage)


def _started_by(process: WorkerProcess, prewarmed: bool) -> str:
    """How a spare was started, as the server log says it (the editing-rhythm bench counts
    them): forked by the zygote, exec'd to prewarm, or exec'd for builds only."""
    if isinstance(process, ForkedProcess):
        return "forked by the zygote"
    return "exec'd" if prewarmed else "exec'd for builds"


def default_harness_command() -> list[str]:
    return [sys.executable, "-m", "kernelblaster.harness.worker"]


def harness_command(settings: Settings) -> list[str]:
    return settings.worker_command or default_harness_command()


async def run_harness(
    request: WorkerRequest,
    settings: Settings,
    *,
    on_progress: Callable[[WorkerProgress], None] = lambda _: None,
    spares: SpareWorkers | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> WorkerResponse:
    """The worker's response; a worker that dies or overruns a phase becomes a response with an
    error. A worker waiting for its GPU turn (`WorkerProgress.wants_gpu`) has no budget until its
    next message."""

    def budget(last: WorkerProgress | None) -> float | None:
        if last is not None and last.wants_gpu:
            return None
        return phase_timeout_s(last.phase if last else "build", settings)

    try:
        return await run_worker(
            harness_command(settings),
            request,
            _harness_decoder,
            WorkerResponse,
            on_progress,
            timeout_s=budget,
            cwd=cwd,
            env=env,
            pass_fds=pass_fds,
            spares=spares,
            gpu_index=settings.gpu,
            spare_hint=expected_request_env(request),
            # the kernel verified and timed: what's left (the profile) may share the CPU
            spare_from=lambda message: message.check is not None,
        )
    except WorkerFailed as failure:
        return WorkerResponse(error=worker_error(failure, settings))


def run_harness_sync(
    request: WorkerRequest,
    settings: Settings,
    *,
    on_progress: Callable[[WorkerProgress], None] = lambda _: None,
) -> WorkerResponse:
    """`run_harness` for callers without an event loop: in a spare worker inside
    `keep_spare_workers()` (`on_progress` is then called from its thread), else in a fresh one."""
    kept = _kept_spares.get()
    if kept is not None:
        return kept.run_harness(request, settings, on_progress)
    return asyncio.run(run_harness(request, settings, on_progress=on_progress))


# --- spare workers for callers without an event loop -----------------------------------------


class SpareWorkerThread:
    """SpareWorkers for synchronous callers: one event loop on its own thread (asyncio subprocesses
    belong to their loop), to which any thread submits a request and blocks for its response.
    After `close`, which kills running workers and spares, a request is refused."""

    def __init__(self, spares: SpareWorkers | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._spares = spares if spares is not None else SpareWorkers()
        self._closed = False
        self._lock = threading.Lock()  # no request slips in while `close` runs
        # A daemon, so an owner that never closes it doesn't keep the interpreter alive (its
        # workers end with this process anyway).
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="spare-workers", daemon=True
        )
        self._thread.start()

    def run_harness(
        self,
        request: WorkerRequest,
        settings: Settings,
        on_progress: Callable[[WorkerProgress], None],
    ) -> WorkerResponse:
        return self._call(
            run_harness(request, settings, on_progress=on_progress, spares=self._spares)
        )

    def prewarm(self, settings: Settings, gpus: list[int]) -> None:
        """Have a harness worker wait, prewarming, on each of `gpus`."""
        for gpu in gpus:
            # A command that can't start is reported by the first request that needs it.
            with contextlib.suppress(WorkerFailed):
                self._call(self._spares.ready(harness_command(settings), gpu))

    def _call(self, coroutine: Coroutine[Any, Any, Result]) -> Result:
        with self._lock:
            if self._closed:
                coroutine.close()
                raise RuntimeError("the run's spare workers are closed: the run has ended")
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C or SIGTERM while waiting: the request's worker (and all it started) is
            # killed now, not left running until it finishes.
            future.cancel()
            raise

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    async def _shut_down(self) -> None:
        # Every other task on this loop is a request (or one of its pipe readers): cancelling
        # it kills its worker (run_worker's `finally`).
        running = asyncio.all_tasks() - {asyncio.current_task()}
        for task in running:
            if not task.cancelling():  # cancelled once (Ctrl-C): let it finish reaping
                task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self._spares.close()


# A context variable, not a global: rollout threads started with a copy of the context find the
# run's object, and a thread outliving its run finds it closed instead of starting an orphan.
_kept_spares: contextvars.ContextVar[SpareWorkerThread | None] = contextvars.ContextVar(
    "kernelblaster_spare_workers", default=None
)


@contextlib.contextmanager
def keep_spare_workers(spares: SpareWorkers | None = None) -> Iterator[None]:
    """Within the block, `run_harness_sync` runs each request in a prewarmed spare worker, one per
    (GPU, command) and replaced once taken, so start-up overlaps the caller's work between requests
    (`spares`: another policy). Every worker it started is killed when the block ends."""
    kept = SpareWorkerThread(spares)
    token = _kept_spares.set(kept)
    try:
        yield
    finally:
        _kept_spares.reset(token)
        kept.close()


def prewarm_harness_workers(settings: Settings, gpus: list[int]) -> None:
    """Inside `keep_spare_workers()`, have a harness worker prewarm on each of `gpus` now; elsewhere
    nothing."""
    kept = _kept_spares.get()
    if kept is not None:
        kept.prewarm(settings, gpus)
