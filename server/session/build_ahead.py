"""Build ahead on edit: when typing pauses, an open kernel's unsaved text is built in a worker of
its own and cached under the file's key, so that saving that text finds its build done. One
build per file: a newer change cancels it, a save of the same text waits for it on the build
cache's lock, a save of other text cancels it. Its workers are not the save's prewarmed spares
(those hold torch and a CUDA context); one is started ahead, when a file opens for editing."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from kernelblaster.harness.protocol.worker_client import SpareWorkers, harness_command, run_harness
from kernelblaster.harness.protocol.worker_failures import WorkerFailed
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.server.editor.documents import text_hash
from kernelblaster.settings import Settings

log = logging.getLogger(__name__)

# Typing paused this long: build what is there. Shorter than the jobs' debounce: the next
# keystroke kills the build it started (a worker and its nvcc: CPU while typing, nothing
# else), and every 0.1 s of pause is 0.1 s more of nvcc done before a save that follows.
PAUSE_S = 0.15


@dataclass
class _AheadBuild:
    text_hash: str
    task: asyncio.Task[WorkerResponse | None] | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)  # the pause is over


class AheadBuilds:
    """The build ahead of each open file's save, if any."""

    def __init__(self, *, pause_s: float = PAUSE_S) -> None:
        self.pause_s = pause_s
        self._builds: dict[Path, _AheadBuild] = {}
        self._spares = SpareWorkers(prewarm=False)
        self._starting: asyncio.Task[None] | None = None  # expect_edits's worker

    def expect_edits(self, settings: Settings) -> None:
        """A kernel source was opened: have a build worker started and waiting for its first
        edit."""
        if self._starting is None or self._starting.done():
            self._starting = asyncio.create_task(self._start_worker(settings))

    async def _start_worker(self, settings: Settings) -> None:
        try:
            await self._spares.ready(harness_command(settings), settings.gpu)
        except WorkerFailed as exc:  # the first build ahead meets it again, and logs it
            log.info("no build worker started ahead: %s", exc)

    def start(
        self, path: Path, text: str, settings: Settings, *, pause_s: float | None = None
    ) -> None:
        """Build `text` as `path` once the pause (`pause_s`, else the typing pause) is over,
        cancelling the build of older text."""
        self.cancel(path)
        ahead = _AheadBuild(text_hash=text_hash(text))
        pause = self.pause_s if pause_s is None else pause_s
        ahead.task = asyncio.create_task(
            self._build(path, text, settings, ahead, pause), name=f"build ahead {path.name}"
        )
        self._builds[path] = ahead

    def cancel(self, path: Path) -> None:
        ahead = self._builds.pop(path, None)
        if ahead is not None and ahead.task is not None:
            ahead.task.cancel()  # kills its worker (harness/protocol/worker_client.py)

    def before_save(self, path: Path, text: str, settings: Settings) -> None:
        """The save's run is about to build `text`: a build of it already under way carries on
        (the save's build waits for it in the build cache); one still waiting out the typing
        pause starts now, beside the run's wait for the GPU and its worker's start (the edit
        and its save came together); a build of other text is cancelled."""
        ahead = self._builds.get(path)
        if ahead is None:
            return
        if ahead.text_hash != text_hash(text):
            self.cancel(path)
        elif not ahead.started.is_set():
            self.start(path, text, settings, pause_s=0.0)

    async def close(self) -> None:
        tasks = [ahead.task for ahead in self._builds.values() if ahead.task is not None]
        if self._starting is not None:
            tasks.append(self._starting)
        self._builds.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._spares.close()

    async def _build(
        self, path: Path, text: str, settings: Settings, ahead: _AheadBuild, pause_s: float
    ) -> WorkerResponse | None:
        try:
            await asyncio.sleep(pause_s)
            ahead.started.set()
            request = WorkerRequest(
                task="build",
                source=str(path),
                settings=settings,
                unsaved_text=text,
            )
            response = await run_harness(request, settings, spares=self._spares)
        except asyncio.CancelledError:
            log.info("build ahead of %s cancelled", path.name)
            raise
        finally:
            if self._builds.get(path) is ahead:
                del self._builds[path]
        built = response.build
        if built is None:
            log.info("build ahead of %s not done: %s", path.name, response.error)
        else:
            log.info(
                "build ahead of %s: %s in %.2f s%s",
                path.name,
                "built" if built.ok else "failed",
                built.seconds,
                " (cached)" if built.cached else "",
            )
        return response
