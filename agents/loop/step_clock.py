"""Timing a step's phases as the loop runs it (agents/loop/step.py): the waits for the LLM, each as
an "llm" span, and the harness's measurements of each evaluation (agents/loop/gpu_gates.py adds the
GPU's queue and span to them). What it measures lands in the step's PhaseTimes, the record the
editor and `optimize --json` get."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.harness.protocol.optimize_protocol import PhaseTimes, Span


class StepClock:
    def __init__(self, phases: PhaseTimes):
        self.phases = phases
        self._waiting_since: float | None = None

    def llm_waits(self) -> None:
        """The LLM is being asked (or the lowering agent goes on to ask it again)."""
        self._waiting_since = time.time()

    def llm_answered(self, field: str = "llm_wait") -> None:
        """The wait begun by `llm_waits` is over; its seconds go to `field` of the phases."""
        if self._waiting_since is None:
            return
        began, end = self._waiting_since, time.time()
        self._waiting_since = None
        setattr(self.phases, field, round(getattr(self.phases, field) + end - began, 4))
        self.phases.spans = [*self.phases.spans, Span(kind="llm", start=began, end=end)]

    @contextmanager
    def llm(self, field: str = "llm_wait") -> Iterator[None]:
        self.llm_waits()
        try:
            yield
        finally:
            self.llm_answered(field)

    @contextmanager
    def timed(self, field: str) -> Iterator[None]:
        """The body's wall seconds, added to `field` (e.g. "kb_write")."""
        began = time.time()
        try:
            yield
        finally:
            setattr(self.phases, field, round(getattr(self.phases, field) + time.time() - began, 4))

    def evaluated(self, evaluation: Evaluation) -> None:
        self.phases.add(evaluation.phases)
