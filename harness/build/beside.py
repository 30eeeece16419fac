"""A build with other work beside it: nvcc's children are waited on by a thread of their own while
the caller prepares the reference's side of the check, so a save waits for the longer of the two,
not their sum. The children stay in the worker's process group, so killing the worker ends them.
Torch-free."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, NamedTuple, TypeVar

from kernelblaster.harness.protocol.records import BuildResult

Prepared = TypeVar("Prepared")


class BuiltBeside(NamedTuple, Generic[Prepared]):
    built: BuildResult
    prepared: Prepared | None  # None when the build failed
    prepared_after_build_s: float  # how long preparing went on once the build had ended


def _failed(building: Future) -> bool:
    return building.done() and (building.exception() is not None or not building.result().ok)


def build_beside(
    build: Callable[[], BuildResult],
    prepare: Callable[[Callable[[], bool]], Prepared],
    *,
    still_preparing: Callable[[], None] = lambda: None,
) -> BuiltBeside[Prepared]:
    """`build()` on a thread of its own while `prepare(abandon)` runs on this one; `abandon()` turns
    true once the build failed, for `prepare` to stop. `still_preparing()` is called when the
    build succeeded first. What `build` raises is raised here, after `prepare` returns."""
    prepared_event = threading.Event()
    ended: list[float] = []

    def build_and_tell() -> BuildResult:
        built = build()
        ended.append(time.perf_counter())
        if built.ok and not prepared_event.is_set():
            still_preparing()
        return built

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="build") as pool:
        building = pool.submit(build_and_tell)
        try:
            prepared = prepare(lambda: _failed(building))
        finally:
            prepared_event.set()
        prepared_at = time.perf_counter()
        built = building.result()
    return BuiltBeside(
        built=built,
        prepared=prepared if built.ok else None,
        prepared_after_build_s=max(0.0, prepared_at - ended[0]),
    )
