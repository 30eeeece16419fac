"""JobManager: what the user asked for starts at once; background events wait out the debounce;
a newer job for the same file cancels the older."""

from __future__ import annotations

import asyncio

from kernelblaster.server.jobs import JobManager


async def test_a_job_the_user_asked_for_starts_without_the_debounce():
    jobs = JobManager(debounce_s=60.0)
    started = asyncio.Event()

    async def work() -> None:
        started.set()

    task = jobs.submit("a.cu", work, debounce=False)
    await asyncio.wait_for(task, timeout=10)
    assert started.is_set()


async def test_a_background_job_waits_out_the_debounce_and_a_newer_one_cancels_it():
    jobs = JobManager(debounce_s=60.0)
    ran: list[str] = []

    async def work(name: str) -> None:
        ran.append(name)

    waiting = jobs.submit("a.cu", lambda: work("watcher"))
    await asyncio.sleep(0)  # let it enter its debounce
    assert jobs.active("a.cu") and ran == []
    saved = jobs.submit("a.cu", lambda: work("save"), debounce=False)
    await asyncio.wait_for(saved, timeout=10)
    assert waiting.cancelled()
    assert ran == ["save"]
    await jobs.close()
