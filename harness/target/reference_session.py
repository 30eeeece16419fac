"""The reference's half of verification, run in the clean reference process: the candidate's process
never holds an expected output, only each trial's inputs and `ExpectedFacts`, and sends its
outputs here to be compared (`compare`). One trial's sets are alive at a time unless all are
small (trial_sets.py). Worker side: imports torch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelblaster.harness.protocol.records import Mismatch
from kernelblaster.harness.target.compare import (
    all_finite,
    compare,
    degenerate_fractions,
    tolerances,
)
from kernelblaster.harness.target.reference_side import ReferenceHabits, ReferenceSide
from kernelblaster.harness.target.tensor_checks import Signature
from kernelblaster.harness.target.trial_sets import TrialSet, decoy_seed, expected_outputs


@dataclass(frozen=True)
class ExpectedFacts:
    """What the candidate's process learns of one set of expected outputs (kept here, under
    `key`): enough to check the layout, remember a right answer and judge the reference."""

    key: int
    shapes: list[tuple[int, ...]]
    dtypes: list[torch.dtype]
    signatures: list[Signature]
    # (zeros, constant): the share of each output an all-zeros or constant output matches
    degenerate: list[tuple[float, float]]
    finite: list[bool]


@dataclass
class SessionTrial:
    """A trial's sets as the candidate's process receives them."""

    seed: int
    inputs: list  # pristine: copied into the candidate's tensors, never handed over
    decoy: list | None  # new tensors holding stale values, handed to the candidate
    expected: ExpectedFacts


@dataclass
class SetsAhead:
    """A session's sets handed over before their trials (`ReferenceSession.hand_over_ahead`),
    each given out once: the stream gate's sizing set, and each trial's by index."""

    warm_up: SessionTrial | None
    trials: dict[int, SessionTrial]


@dataclass(frozen=True)
class SessionFacts:
    """What a session tells the candidate's process when it opens."""

    habits: ReferenceHabits
    seeds: list[int]
    trials: int
    ahead_bytes: int  # held by the sets made ahead (0: each made when its trial starts)
    seconds: dict[str, float]  # making the session's side (reference_load, reference_sets...)


class ReferenceSession:
    """Trials' sets and comparisons against one reference (`side`, made in this process)."""

    def __init__(self, side: ReferenceSide, *, atol: float | None, rtol: float | None):
        reference, _, habits, plan = side.ready()
        self.reference, self.device, self.plan = reference, plan.device, plan
        self.habits = habits
        self.atol, self.rtol = atol, rtol
        self._expected: dict[int, list[torch.Tensor]] = {}
        self._next_key = 0
        self.facts = SessionFacts(
            habits=habits,
            seeds=list(plan.seeds),
            trials=plan.trials,
            ahead_bytes=plan.held_bytes,
            seconds=dict(side.seconds),
        )

    # --- the sets -----------------------------------------------------------------------

    def warm_up(self) -> SessionTrial:
        return self._hand_over(self.plan.warm_up(), degeneracy=False)

    def take(self, index: int) -> SessionTrial:
        """Trial `index`'s sets; the first trial's facts say how degenerate its outputs are."""
        return self._hand_over(self.plan.take(index), degeneracy=index == 0)

    def hand_over_ahead(self) -> SetsAhead:
        """Every set made ahead, for the candidate's process to hold before its trials:
        nothing where they are made one trial's at a time."""
        if not self.plan.made_ahead:
            return SetsAhead(warm_up=None, trials={})
        trials = {index: self.take(index) for index in range(len(self.plan.seeds))}
        return SetsAhead(warm_up=self.warm_up(), trials=trials)

    def scaled(self, seed: int, scale: float) -> SessionTrial:
        """`seed`'s inputs with every floating-point tensor multiplied by `scale` (a weak
        reference's outputs may be informative there), and the expected outputs on them."""
        inputs = [
            x * scale if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in self.reference.inputs(seed, self.device)
        ]
        expected = expected_outputs(self.reference, inputs, copy=self.plan.copies_inputs)
        made = TrialSet(seed, inputs, expected, decoy=None)
        return self._hand_over(made, degeneracy=True)

    def decoy(self, seed: int) -> list:
        """Stale values for `seed`'s inputs: `get_inputs()` under its decoy seed."""
        return self.reference.inputs(decoy_seed(seed), self.device)

    def _hand_over(self, made: TrialSet, *, degeneracy: bool) -> SessionTrial:
        key = self._next_key
        self._next_key += 1
        expected = made.expected
        self._expected[key] = expected
        tolerance = [tolerances(e.dtype, self.atol, self.rtol) for e in expected]
        facts = ExpectedFacts(
            key=key,
            shapes=[tuple(e.shape) for e in expected],
            dtypes=[e.dtype for e in expected],
            signatures=[Signature.of(e) for e in expected],
            degenerate=[
                degenerate_fractions(e, atol=atol, rtol=rtol) if degeneracy else (0.0, 0.0)
                for e, (atol, rtol) in zip(expected, tolerance, strict=True)
            ],
            finite=[all_finite(e) for e in expected],
        )
        return SessionTrial(seed=made.seed, inputs=made.inputs, decoy=made.decoy, expected=facts)

    def release(self, key: int) -> None:
        """The trial of `key` is over: its expected outputs go back to the allocator."""
        self._expected.pop(key, None)

    def trim(self) -> None:
        """Between verification and the trial after timing: a large problem's blocks, cached
        by torch's allocator, go back to the device while the candidate is timed."""
        if self.device.type == "cuda" and torch.cuda.memory_reserved(self.device) > (1 << 30):
            torch.cuda.empty_cache()

    # --- comparing ----------------------------------------------------------------------

    def compare(
        self, key: int, actual: list, *, trial: int, seed: int, scale: float | None = None
    ) -> list[Mismatch]:
        """How `actual` (shaped like the expected outputs: the caller checked the layout)
        differs from the expected outputs of `key`; empty when it matches."""
        found = []
        expected = self._expected[key]
        for j, (a, e) in enumerate(zip(actual, expected, strict=True)):
            atol, rtol = tolerances(e.dtype, self.atol, self.rtol)
            mismatch = compare(a, e, atol=atol, rtol=rtol, output=j, trial=trial, seed=seed)
            if mismatch is not None:
                mismatch.input_scale = scale
                found.append(mismatch)
        return found

    def tolerances(self, dtype: torch.dtype) -> tuple[float, float]:
        return tolerances(dtype, self.atol, self.rtol)
