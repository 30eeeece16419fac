"""JobManager: what the user asked for starts at once; background events wait out the debounce;
a newer job for the same file cancels the older. GpuSlots: interactive work in order, before
background work, which is stopped once it yields and resumes after every interactive waiter."""

from __future__ import annotations

import asyncio

from kernelblaster.server.session.jobs import GpuSlots, JobManager


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


async def test_interactive_work_waits_for_interactive_work_in_order_and_stops_none():
    slots = GpuSlots(1)
    order: list[str] = []

    async def hold(name: str, release: asyncio.Event) -> None:
        async with slots.hold():
            order.append(name)
            await release.wait()

    releases = {name: asyncio.Event() for name in ("a", "b", "c")}
    tasks = [asyncio.create_task(hold(name, releases[name])) for name in ("a", "b", "c")]
    await asyncio.sleep(0.01)
    assert order == ["a"]  # b and c wait; nothing stops a, which never yielded
    for name in ("a", "b", "c"):
        releases[name].set()
        await asyncio.sleep(0.01)
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"]


async def test_background_work_yields_to_interactive_work_and_waits_for_all_of_it():
    slots = GpuSlots(1)
    events: list[str] = []
    release = asyncio.Event()

    async def background_work() -> None:
        async with slots.hold() as slot:
            work = asyncio.create_task(asyncio.sleep(60))
            slot.yield_to_interactive(work.cancel)  # its interactive part is done
            events.append("background running")
            try:
                await work
            except asyncio.CancelledError:
                assert slot.preempted
                events.append("background stopped")
        async with slots.hold(background=True):  # resumed, after every interactive waiter
            events.append("background resumed")

    async def interactive(name: str) -> None:
        async with slots.hold():
            events.append(name)
            await release.wait()

    stopped = asyncio.create_task(background_work())
    await asyncio.sleep(0.01)
    first = asyncio.create_task(interactive("first save"))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(interactive("second save"))
    await asyncio.sleep(0.01)
    assert events == ["background running", "background stopped", "first save"]
    release.set()
    await asyncio.gather(stopped, first, second)
    assert events[3:] == ["second save", "background resumed"]


async def test_a_cancelled_waiter_leaves_the_queue():
    slots = GpuSlots(1)
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with slots.hold():
            held.set()
            await release.wait()

    first = asyncio.create_task(holder())
    await held.wait()
    waiting = asyncio.create_task(slots.hold().__aenter__())
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    release.set()
    await first
    async with asyncio.timeout(1):
        async with slots.hold(background=True):  # nothing left waiting before it
            pass
