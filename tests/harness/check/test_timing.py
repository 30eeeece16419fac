"""The timing loop's repetition bound, on a fake device clock: a slow kernel is timed a few
times, not a fixed count; a steady fast one until its median is pinned down, a noisy one up to
the cap; the cold first launch doesn't calibrate."""

import itertools
import statistics

import pytest

from kernelblaster.harness.check.timing import (
    MEDIAN_PRECISION,
    MIN_REPETITIONS,
    median_interval,
    plan_repetitions,
    time_callable,
)


class FakeDevice:
    """A device whose kernels take `kernel_ms` times the next of `factors` (the first launch
    `cold_ms`), queued in order: `mark()` returns the time the queue reaches it, as a CUDA
    event would record."""

    def __init__(
        self, kernel_ms: float, cold_ms: float | None = None, factors: list[float] | None = None
    ):
        self.kernel_ms, self.cold_ms = kernel_ms, cold_ms
        self.factors = itertools.cycle(factors or [1.0])
        self.queue_end = 0.0  # device time when everything enqueued so far is done
        self.launches = 0
        self.synchronized_after: list[int] = []  # launches so far, at each synchronize

    def run(self, inputs: list) -> None:
        cold = self.launches == 0 and self.cold_ms is not None
        self.queue_end += self.cold_ms if cold else self.kernel_ms * next(self.factors)
        self.launches += 1

    def mark(self) -> float:
        return self.queue_end

    def elapsed_ms(self, start: float, end: float) -> float:
        return end - start

    def synchronize(self) -> None:
        self.synchronized_after.append(self.launches)

    def flush_l2(self) -> None:
        pass


def test_a_300_ms_kernel_is_timed_within_the_budget_not_for_a_minute():
    device = FakeDevice(kernel_ms=300.0)
    timing = time_callable(device.run, [[1], [2], [3]], clock=device, budget_ms=1000.0)
    assert timing.repetitions == 3
    assert timing.median_ms == pytest.approx(300.0)
    # two calibration launches, no warm-up, three timed: 1.5 s of device time, not 200 x 0.3 s
    assert device.launches == 5
    assert device.queue_end == pytest.approx(1500.0)


def test_a_kernel_longer_than_the_budget_is_timed_once():
    device = FakeDevice(kernel_ms=5000.0)
    timing = time_callable(device.run, [[1]], clock=device, budget_ms=1000.0)
    assert timing.repetitions == 1 and device.launches == 3
    assert timing.p20_ms == timing.p80_ms == timing.median_ms == pytest.approx(5000.0)


def test_a_steady_fast_kernel_stops_once_its_median_is_pinned_down():
    # 1.5 ms, within ±0.2%: the first 20 repetitions pin the median (a fixed 200 took 300 ms)
    device = FakeDevice(kernel_ms=1.5, factors=[1.0, 1.002, 0.998, 1.001, 0.999])
    timing = time_callable(device.run, [[1], [2]], clock=device, max_repetitions=200, warmup=3)
    assert timing.repetitions == MIN_REPETITIONS
    assert device.launches == 2 + 3 + MIN_REPETITIONS
    assert timing.median_ms == pytest.approx(1.5, rel=1e-3)


def test_a_noisy_kernel_gets_the_full_warm_up_and_the_repetition_cap():
    # spread evenly over ±5% (97 values in a shuffled order): 200 samples pin its median to
    # about ±0.7%, never ±0.5%
    spread = [0.95 + 0.1 * ((k * 37) % 97) / 96 for k in range(97)]
    device = FakeDevice(kernel_ms=0.01, factors=spread)
    timing = time_callable(device.run, [[1], [2]], clock=device, max_repetitions=200, warmup=3)
    assert timing.repetitions == 200
    assert device.launches == 2 + 3 + 200
    # checked in rounds: 20 first, then 10 at a time, each round synchronized before reading
    rounds = [n - 5 for n in device.synchronized_after[3:]]
    assert rounds == list(range(20, 201, 10))


def test_a_kernel_that_settles_is_timed_until_the_median_is_pinned_down():
    # spread ±3% for the first 40 launches, then steady: more than the floor, far below the cap
    device = FakeDevice(kernel_ms=1.0, factors=[0.97, 1.03] * 20 + [1.0] * 1000)
    timing = time_callable(device.run, [[1]], clock=device, max_repetitions=200, warmup=3)
    assert MIN_REPETITIONS < timing.repetitions < 200
    assert timing.median_ms == pytest.approx(1.0)


def test_the_cold_first_launch_does_not_calibrate():
    # torch.compile's first call compiles for seconds: calibrating on it would time once
    device = FakeDevice(kernel_ms=0.5, cold_ms=20_000.0)
    timing = time_callable(device.run, [[1]], clock=device, budget_ms=1000.0)
    # calibrated on the 20 s launch it would be timed once; on 0.5 ms, until pinned down
    assert timing.repetitions == MIN_REPETITIONS
    assert timing.median_ms == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("launch_ms", "expected"),
    [(0.0, (3, 200)), (1.0, (3, 200)), (50.0, (2, 20)), (300.0, (0, 3)), (2000.0, (0, 1))],
)
def test_plan_repetitions(launch_ms, expected):
    assert plan_repetitions(launch_ms, budget_ms=1000.0, max_repetitions=200, warmup=3) == expected


@pytest.mark.parametrize(("n", "ranks"), [(5, None), (6, (1, 6)), (20, (6, 15)), (100, (40, 61))])
def test_the_median_interval_is_the_distribution_free_95_percent_one(n, ranks):
    """The order statistics x(j), x(n+1-j) of the binomial tables (1-based ranks)."""
    times = [float(i) for i in range(1, n + 1)]
    interval = median_interval(times)
    assert interval == (None if ranks is None else (float(ranks[0]), float(ranks[1])))


def test_the_stop_rule_is_the_stated_precision():
    steady = sorted(1.0 + 0.0001 * i for i in range(MIN_REPETITIONS))
    low, high = median_interval(steady)
    median = statistics.median(steady)
    assert max(median - low, high - median) <= MEDIAN_PRECISION * median


def test_the_full_plan_times_every_repetition_within_the_budget():
    # bench/timing_plan.py's comparison: the plan before the stop rule
    device = FakeDevice(kernel_ms=1.5)
    timing = time_callable(device.run, [[1]], clock=device, min_repetitions=200)
    assert timing.repetitions == 200
