"""The timing loop's repetition bound, on a fake device clock: a slow kernel is timed a few
times, not a fixed count; a fast one up to the cap; the cold first launch doesn't calibrate."""

import pytest

from kernelblaster.harness.timing import plan_repetitions, time_callable


class FakeDevice:
    """A device whose kernels take `kernel_ms` (the first launch `cold_ms`), queued in order:
    `mark()` returns the time the queue reaches it, as a CUDA event would record."""

    def __init__(self, kernel_ms: float, cold_ms: float | None = None):
        self.kernel_ms, self.cold_ms = kernel_ms, cold_ms
        self.queue_end = 0.0  # device time when everything enqueued so far is done
        self.launches = 0

    def run(self, inputs: list) -> None:
        cold = self.launches == 0 and self.cold_ms is not None
        self.queue_end += self.cold_ms if cold else self.kernel_ms
        self.launches += 1

    def mark(self) -> float:
        return self.queue_end

    def elapsed_ms(self, start: float, end: float) -> float:
        return end - start

    def synchronize(self) -> None:
        pass

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


def test_a_fast_kernel_gets_the_full_warm_up_and_the_repetition_cap():
    device = FakeDevice(kernel_ms=0.01)
    timing = time_callable(device.run, [[1], [2]], clock=device, max_repetitions=200, warmup=3)
    assert timing.repetitions == 200
    assert device.launches == 2 + 3 + 200


def test_the_cold_first_launch_does_not_calibrate():
    # torch.compile's first call compiles for seconds: calibrating on it would time once
    device = FakeDevice(kernel_ms=0.5, cold_ms=20_000.0)
    timing = time_callable(device.run, [[1]], clock=device, budget_ms=1000.0)
    assert timing.repetitions == 200  # 1000 ms / 0.5 ms = 2000, capped
    assert timing.median_ms == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("launch_ms", "expected"),
    [(0.0, (3, 200)), (1.0, (3, 200)), (50.0, (2, 20)), (300.0, (0, 3)), (2000.0, (0, 1))],
)
def test_plan_repetitions(launch_ms, expected):
    assert plan_repetitions(launch_ms, budget_ms=1000.0, max_repetitions=200, warmup=3) == expected
