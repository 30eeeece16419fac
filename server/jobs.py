"""Per-file background jobs: debounce (for events the user did not ask for: file watcher,
settings), newest-wins cancellation, and the GPU's slots.

A file has at most one job. Submitting a newer one for the same file cancels the older, whether
it is still waiting out its debounce, waiting for the GPU, or running (cancelling the task kills
its worker, see worker_client). Jobs that use the GPU take one of `gpu_slots` slots, so two
profiles never share a GPU unless the user configured `parallelGpuJobs`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.3


class JobManager:
    def __init__(self, *, debounce_s: float = DEBOUNCE_S, gpu_slots: int = 1) -> None:
        self.debounce_s = debounce_s
        self._gpu_slots = max(1, gpu_slots)
        self._gpu = asyncio.Semaphore(self._gpu_slots)
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

    def active(self, key: str) -> bool:
        task = self._jobs.get(key)
        return task is not None and not task.done()

    def gpu(self) -> asyncio.Semaphore:
        """`async with jobs.gpu():` around the part of a job that uses the GPU."""
        return self._gpu

    def set_gpu_slots(self, slots: int) -> None:
        # Jobs holding a slot of the old semaphore finish with it; new jobs queue on the new one.
        slots = max(1, slots)
        if slots != self._gpu_slots:
            self._gpu_slots = slots
            self._gpu = asyncio.Semaphore(slots)

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
