"""Timing with CUDA events: warm-up, L2 flushed before every trial, inputs rotated, median and
spread. Worker side: imports torch."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from kernelblaster.harness.records import Timing


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer twice the L2 size; writing it evicts whatever a previous trial left in L2."""
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size or 64 * 1024 * 1024
    return torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device)


def time_callable(
    run: Callable[[list], object],
    input_sets: list[list],
    *,
    device: torch.device,
    warmup: int = 3,
    min_repetitions: int = 10,
    max_repetitions: int = 200,
    budget_s: float = 1.0,
) -> Timing:
    flush = l2_flush_buffer(device)
    for i in range(warmup):
        run(input_sets[i % len(input_sets)])
    torch.cuda.synchronize(device)
    starts, ends = [], []
    began = time.perf_counter()
    for i in range(max_repetitions):
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run(input_sets[i % len(input_sets)])
        end.record()
        starts.append(start)
        ends.append(end)
        if i + 1 >= min_repetitions and time.perf_counter() - began > budget_s:
            break
    torch.cuda.synchronize(device)
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    quantiles = statistics.quantiles(times, n=5) if len(times) >= 2 else [times[0]] * 4
    return Timing(
        median_ms=statistics.median(times),
        min_ms=times[0],
        max_ms=times[-1],
        p20_ms=quantiles[0],
        p80_ms=quantiles[3],
        repetitions=len(times),
    )


def escaped_work_ms(run: Callable[[list], object], inputs: list, device: torch.device) -> float:
    """How long the device stays busy after the timed stream's end event completed. Work that
    a candidate moved to another stream finishes after it, outside the measured region."""
    torch.cuda.synchronize(device)
    end = torch.cuda.Event()
    run(inputs)
    end.record()
    end.synchronize()
    began = time.perf_counter()
    torch.cuda.synchronize(device)
    return (time.perf_counter() - began) * 1000.0
