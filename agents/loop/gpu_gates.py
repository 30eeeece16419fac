"""One gate per GPU: a run's rollouts go on at once and only their candidates' evaluations queue,
`slots` at a time per GPU (default one, so a timing never shares its GPU). Whatever else must not
share a GPU with an evaluation (the baselines' timing) takes a turn too. `GatedEvaluate` wraps
`evaluate`, adding the wait and the held time to its phases; it pickles without its gates (a Ray
task gets its own)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.harness.protocol.optimize_protocol import Span

Evaluate = Callable[..., Evaluation]


class _Gate:
    """`slots` holders at a time, granted in the order they asked: a rollout that asks again as
    soon as its evaluation ends does not pass one that has waited (the baselines' turn)."""

    def __init__(self, slots: int):
        self._free = slots
        self._queue: collections.deque[object] = collections.deque()
        self._changed = threading.Condition()

    def acquire(self) -> None:
        ticket = object()
        with self._changed:
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self._free == 0:
                self._changed.wait()
            self._queue.popleft()
            self._free -= 1
            self._changed.notify_all()  # the next in line, where a slot is still free

    def release(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()


class GpuGates:
    def __init__(self, *, slots: int = 1):
        # at least one, as the server's job slots (server/session/jobs.py) take parallel_gpu_jobs
        self.slots = max(1, slots)
        self._gates: dict[int, _Gate] = {}
        self._lock = threading.Lock()

    @contextmanager
    def turn(self, gpu: int) -> Iterator[float]:
        """Hold one of `gpu`'s slots for the body, granted first come, first served; yields
        when (time.time()) it was granted."""
        with self._lock:
            gate = self._gates.setdefault(gpu, _Gate(self.slots))
        gate.acquire()
        try:
            yield time.time()
        finally:
            gate.release()


class GatedEvaluate:
    def __init__(self, evaluate: Evaluate, *, slots: int = 1, gates: GpuGates | None = None):
        self.evaluate = evaluate
        self.gates = gates or GpuGates(slots=slots)

    def __call__(self, source, text, kernel, settings, **options) -> Evaluation:
        gpu = settings.gpu
        asked = time.time()
        with self.gates.turn(gpu) as start:
            evaluation = self.evaluate(source, text, kernel, settings, **options)
            end = time.time()
        phases = evaluation.phases
        phases.gpu_queue = round(phases.gpu_queue + start - asked, 4)
        phases.evaluation = round(phases.evaluation + end - start, 4)
        phases.spans = [*phases.spans, Span(kind="gpu", start=start, end=end, gpu=gpu)]
        return evaluation

    def __getstate__(self) -> dict:
        return {"evaluate": self.evaluate, "slots": self.gates.slots}

    def __setstate__(self, state: dict) -> None:
        self.evaluate, self.gates = state["evaluate"], GpuGates(slots=state["slots"])
