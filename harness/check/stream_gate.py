"""Holding the caller's stream busy while a candidate is called, to see whether its work is ordered
inside that stream. Worker side: imports torch.

A spinning kernel (the gate) holds the stream ahead of the copy that fills this trial's inputs,
the call and the copy of its outputs: work not ordered after the stream reads stale inputs, and
work the stream doesn't wait for is unfinished when the outputs are copied."""

from __future__ import annotations

import torch

_CALIBRATION_CYCLES = 2_000_000
MIN_GATE_MS = 2.0
MAX_GATE_MS = 1000.0


_cycles_per_ms: dict[int, float] = {}  # per device index, measured once per process


def calibrate(device: torch.device) -> float:
    """The spin kernel's cycles per millisecond on `device`, measured on its first call in
    the process (loading torch's spin kernel on the way) and remembered: a spare worker
    calls it ahead of its request (harness/worker/serve.py)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _cycles_per_ms:
        with torch.cuda.device(index):
            torch.cuda._sleep(_CALIBRATION_CYCLES)  # the first launch loads the kernel
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(_CALIBRATION_CYCLES)
            end.record()
            end.synchronize()
        _cycles_per_ms[index] = _CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-3)
    return _cycles_per_ms[index]


class StreamGate:
    def __init__(self, device: torch.device):
        self.device = device
        self.cycles_per_ms = calibrate(device)
        self.hold_ms = MIN_GATE_MS

    def fit_to_call(self, host_call_ms: float) -> None:
        """Size the gate to outlast a candidate call that took `host_call_ms` on the host."""
        self.hold_ms = min(MAX_GATE_MS, max(MIN_GATE_MS, 4.0 * host_call_ms + 1.0))

    def close(self) -> None:
        """Enqueue the gate on the current stream."""
        torch.cuda._sleep(int(self.hold_ms * self.cycles_per_ms))
