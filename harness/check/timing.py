"""Timing with CUDA events: calibrated by a synchronized launch, warm-up, L2 flushed before every
trial, inputs rotated, median and spread. Worker side: imports torch.

Repetitions are bounded by measured device time (a host-time budget would queue a minute of a 300
ms kernel) and stop once the median's distribution-free 95% interval is within
±`MEDIAN_PRECISION`, from `MIN_REPETITIONS` on (docs/checking.md, "Timing"). A `DeviceClock` lets
tests fake the device."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Protocol

import torch

from kernelblaster.harness.protocol.records import Timing
from kernelblaster.harness.target.memory import fits
from kernelblaster.harness.target.reference import Reference
from kernelblaster.harness.target.trial_sets import AHEAD_MAX_BYTES

MIN_REPETITIONS = 20
ROUND = 10
MEDIAN_PRECISION = 0.005  # the 95% interval's half-width over the median at which timing stops
_CONFIDENCE = 0.95
# Timing rotates three input sets only while two more sets take at most this share of the
# free memory and at most AHEAD_MAX_BYTES (a large problem is timed on one: its footprint is
# not multiplied, and its sets are far larger than the L2 cache anyway).
_TIMING_MEMORY_SHARE = 0.25


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


class HostClock:
    """The host's clock, for a CPU device, whose calls return with their work done: what the
    tests without a GPU time the baselines' path with (harness/check/clean_baselines.py)."""

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed_ms(self, start, end) -> float:
        return (end - start) * 1e3

    def synchronize(self) -> None:
        pass

    def flush_l2(self) -> None:
        pass


def device_clock(device: torch.device) -> DeviceClock:
    return CudaClock(device) if device.type == "cuda" else HostClock()


def timing_input_sets(reference: Reference, seeds: list[int], device: torch.device) -> list[list]:
    """Input sets the timing rotates through (so a kernel can't keep one set's answer): three
    when they fit easily in the free memory, else one (verification already changed inputs in
    place and between calls)."""
    first = reference.inputs(seeds[0], device)
    size = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
    if 2 * size > AHEAD_MAX_BYTES or not fits(2 * size, device, share=_TIMING_MEMORY_SHARE):
        return [first]
    return [first, *(reference.inputs(seed, device) for seed in seeds[1:3])]


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


def median_interval(times: list[float]) -> tuple[float, float] | None:
    """The median's 95% confidence interval from sorted `times`, whatever their distribution:
    the order statistics x(j) and x(n+1-j) for the largest j with P(Binomial(n, 1/2) < j) at
    most 2.5%. None when there are too few times for one (fewer than 6)."""
    n = len(times)
    tail = 0.0  # P(B <= j - 1)
    j = 0
    while j < n // 2:
        tail += math.comb(n, j) / 2.0**n
        if 2 * tail > 1 - _CONFIDENCE:
            break
        j += 1
    return (times[j - 1], times[n - j]) if j > 0 else None


def _pinned_down(times: list[float], min_repetitions: int) -> bool:
    """Whether the median of sorted `times` is known to ±MEDIAN_PRECISION (95%)."""
    interval = median_interval(times)
    if len(times) < min_repetitions or interval is None:
        return False
    median = statistics.median(times)
    half_width = max(median - interval[0], interval[1] - median)
    return half_width <= MEDIAN_PRECISION * median


def time_callable(
    run: Callable[[list], object],
    input_sets: list[list],
    *,
    clock: DeviceClock,
    warmup: int = 3,
    max_repetitions: int = 200,
    budget_ms: float = 1000.0,
    min_repetitions: int = MIN_REPETITIONS,
) -> Timing:
    """The median and spread of `run`'s device time over `input_sets`, rotated. With
    `min_repetitions` at `max_repetitions`, every repetition within the budget is timed (the
    plan before the stop rule; bench/timing_plan.py compares them)."""

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
    times: list[float] = []
    while len(times) < repetitions and not _pinned_down(times, min_repetitions):
        first = len(times)
        count = min(repetitions, max(min_repetitions, first + ROUND)) - first
        marks = [timed_launch(input_sets[(first + i) % len(input_sets)]) for i in range(count)]
        clock.synchronize()
        times = sorted([*times, *(clock.elapsed_ms(s, e) for s, e in marks)])
    quantiles = statistics.quantiles(times, n=5) if len(times) >= 2 else [times[0]] * 4
    return Timing(
        median_ms=statistics.median(times),
        min_ms=times[0],
        max_ms=times[-1],
        p20_ms=quantiles[0],
        p80_ms=quantiles[3],
        repetitions=len(times),
    )
