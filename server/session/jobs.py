"""Per-file background jobs: debounce (for events the user did not ask for), newest-wins
cancellation (a save supersedes its own file's work, never another file's), and the GPU's slots
(`GpuSlots`): interactive work (a save's build, verification, timing, quick state) first;
background work (full profile, baselines) yields to it, is stopped if it must, and resumes
later, never lost. Two profiles share a GPU only with `parallelGpuJobs`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.3


class Slot:
    """One held GPU slot. Interactive until `yield_to_interactive`; then `preempted` once
    interactive work has stopped it."""

    def __init__(self, slots: GpuSlots) -> None:
        self._slots = slots
        self._stop: Callable[[], object] | None = None
        self.preempted = False

    @property
    def yielding(self) -> bool:
        return self._stop is not None

    def yield_to_interactive(self, stop: Callable[[], object]) -> None:
        """What runs in this slot from now on is background work: interactive work that
        finds no free slot calls `stop` (which must end the holder's work, e.g. cancel the
        task running its worker), and the holder leaves the slot."""
        self._stop = stop
        self._slots._dispatch()

    def _preempt(self) -> None:
        assert self._stop is not None
        self.preempted = True
        self._stop()


@dataclass(eq=False)
class _Waiter:
    background: bool
    granted: asyncio.Future[Slot] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class GpuSlots:
    """`slots` GPU slots: interactive waiters first (in order), background waiters (in order)
    only while no interactive one waits; a waiting interactive one stops a yielding holder."""

    def __init__(self, slots: int = 1) -> None:
        self._slots = max(1, slots)
        self._holders: list[Slot] = []
        self._waiters: list[_Waiter] = []

    @property
    def slots(self) -> int:
        return self._slots

    def resize(self, slots: int) -> None:
        # Holders beyond a smaller count finish their work; new work waits until they have.
        self._slots = max(1, slots)
        self._dispatch()

    @asynccontextmanager
    async def hold(self, *, background: bool = False) -> AsyncIterator[Slot]:
        """`async with slots.hold() as slot:` around the part of a job that uses the GPU;
        `background=True` for work resumed after being stopped (it waits for every
        interactive waiter; it should `yield_to_interactive` once it has started)."""
        waiter = _Waiter(background)
        self._waiters.append(waiter)
        self._dispatch()
        try:
            slot = await waiter.granted
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.granted.done() and not waiter.granted.cancelled():
                self._holders.remove(waiter.granted.result())  # granted as it was cancelled
            self._dispatch()
            raise
        try:
            yield slot
        finally:
            self._holders.remove(slot)
            self._dispatch()

    def _dispatch(self) -> None:
        while len(self._holders) < self._slots and self._waiters:
            waiter = next((w for w in self._waiters if not w.background), self._waiters[0])
            self._waiters.remove(waiter)
            slot = Slot(self)
            self._holders.append(slot)
            waiter.granted.set_result(slot)
        wanting = sum(not w.background for w in self._waiters)
        stopping = sum(slot.preempted for slot in self._holders)
        for slot in self._holders:
            if stopping >= wanting:
                break
            if slot.yielding and not slot.preempted:
                slot._preempt()
                stopping += 1


class JobManager:
    def __init__(self, *, debounce_s: float = DEBOUNCE_S, gpu_slots: int = 1) -> None:
        self.debounce_s = debounce_s
        self.gpu_slots = GpuSlots(gpu_slots)
        self._jobs: dict[str, asyncio.Task[None]] = {}

    def submit(
        self, key: str, work: Callable[[], Awaitable[None]], *, debounce: bool = True
    ) -> asyncio.Task[None]:
        """Run `work` for `key`, cancelling the key's previous job: after the debounce, or at
        once for what the user asked for (a save, an open, a command), where every 0.3 s shows."""
        self.cancel(key)
        delay = self.debounce_s if debounce else 0.0
        task = asyncio.create_task(self._run(key, work, delay), name=f"job {key}")
        self._jobs[key] = task
        return task

    def cancel(self, key: str) -> bool:
        task = self._jobs.pop(key, None)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def superseded(self, key: str) -> bool:
        """Whether the calling job of `key` has been replaced by a newer one (which reports
        its own status from then on)."""
        task = self._jobs.get(key)
        return task is not None and task is not asyncio.current_task()

    def active(self, key: str) -> bool:
        task = self._jobs.get(key)
        return task is not None and not task.done()

    def gpu(self, *, background: bool = False) -> AbstractAsyncContextManager[Slot]:
        """`async with jobs.gpu() as slot:` around the part of a job that uses the GPU
        (`GpuSlots.hold`)."""
        return self.gpu_slots.hold(background=background)

    def set_gpu_slots(self, slots: int) -> None:
        self.gpu_slots.resize(slots)

    async def close(self) -> None:
        tasks = list(self._jobs.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._jobs.clear()

    async def _run(self, key: str, work: Callable[[], Awaitable[None]], delay: float) -> None:
        try:
            await asyncio.sleep(delay)
            await work()
        except asyncio.CancelledError:
            log.info("job %s cancelled", key)
            raise
        except Exception:
            # A bug in a job must not pass silently, nor take the server down with it.
            log.exception("job %s failed", key)
        finally:
            if self._jobs.get(key) is asyncio.current_task():
                del self._jobs[key]
