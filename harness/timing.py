"""Timing with CUDA events: calibrated by a synchronized launch, warm-up, L2 flushed before every
trial, inputs rotated, median and spread. Worker side: imports torch.

The number of timed repetitions is bounded by measured *device* time: a launch returns long
before its kernel ends, so a loop that budgets host time would queue all its repetitions of a
300 ms kernel (a minute of GPU work) before noticing. Instead one synchronized launch measures
the kernel first (after a cold one that pays for module loading and the like), and the
repetitions are as many as fit in the budget, at least one, at most `max_repetitions`.

The loop talks to the device through a `DeviceClock`, so the bound can be tested with a fake
clock on a machine without a GPU."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Protocol

import torch

from kernelblaster.harness.records import Timing


class DeviceClock(Protocol):
    def mark(self) -> object:
        """A point on the timed stream, recorded after the work enqueued so far."""
        ...

    def elapsed_ms(self, start: object, end: object) -> float:
        """Device time between two marks (call after `synchronize`)."""
        ...

    def synchronize(self) -> None: ...

    def flush_l2(self) -> None:
        """Evict what the previous launch left in L2 (enqueued before the next `mark`)."""
        ...


class CudaClock:
    """CUDA events on the current stream; the L2 is flushed by writing a buffer twice its size."""

    def __init__(self, device: torch.device):
        self.device = device
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size or 64 * 1024 * 1024
        self._flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device)

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def flush_l2(self) -> None:
        self._flush.zero_()


def plan_repetitions(
    launch_ms: float, *, budget_ms: float, max_repetitions: int, warmup: int
) -> tuple[int, int]:
    """(warm-up launches, timed repetitions) for a kernel taking `launch_ms`: as many timed
    repetitions as fit in `budget_ms` (at least 1, at most `max_repetitions`), and the
    warm-up only where it costs under a tenth of the budget (the calibration launches have
    warmed a slow kernel up already)."""
    fit = int(budget_ms // launch_ms) if launch_ms > 0 else max_repetitions
    repetitions = min(max_repetitions, max(1, fit))
    return min(warmup, fit // 10), repetitions


def time_callable(
    run: Callable[[list], object],
    input_sets: list[list],
    *,
    clock: DeviceClock,
    warmup: int = 3,
    max_repetitions: int = 200,
    budget_ms: float = 1000.0,
) -> Timing:
    def timed_launch(inputs: list) -> tuple[object, object]:
        clock.flush_l2()
        start = clock.mark()
        run(inputs)
        return start, clock.mark()

    clock.synchronize()
    run(input_sets[0])  # cold: module loading, lazy initialization, autotuning
    clock.synchronize()
    start, end = timed_launch(input_sets[-1])
    clock.synchronize()
    warm, repetitions = plan_repetitions(
        clock.elapsed_ms(start, end),
        budget_ms=budget_ms,
        max_repetitions=max_repetitions,
        warmup=warmup,
    )
    for i in range(warm):
        run(input_sets[i % len(input_sets)])
    marks = [timed_launch(input_sets[i % len(input_sets)]) for i in range(repetitions)]
    clock.synchronize()
    times = sorted(clock.elapsed_ms(s, e) for s, e in marks)
    quantiles = statistics.quantiles(times, n=5) if len(times) >= 2 else [times[0]] * 4
    return Timing(
        median_ms=statistics.median(times),
        min_ms=times[0],
        max_ms=times[-1],
        p20_ms=quantiles[0],
        p80_ms=quantiles[3],
        repetitions=len(times),
    )
