"""The input sets verification's trials use and the reference's answers on them: made ahead when all
are small (while nvcc builds), else each when its trial starts, so a large problem holds one
trial's sets at a time. Worker side: imports torch.

Trial `i` has pristine `inputs`, `expected` outputs, and a `decoy` under a second seed that the
candidate is handed until the gated copy; every other trial reuses the previous tensors changed
in place instead (`reuses_previous_inputs`)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelblaster.harness.target.memory import AHEAD_MAX_BYTES, fits
from kernelblaster.harness.target.reference import Reference, as_outputs

# Sets are made ahead only while they take at most this share of the free memory and
# AHEAD_MAX_BYTES: a small problem gains readiness, a large one would multiply its footprint.
AHEAD_MEMORY_SHARE = 0.25


# Verification runs at least this many trials, whatever the settings ask
MIN_TRIALS = 3


def reuses_previous_inputs(index: int, trials: int) -> bool:
    """Whether trial `index` of `trials` hands the candidate the previous trial's tensors
    (changed in place), so that a cache keyed on tensors rather than values returns a stale
    answer. The recheck after timing (index `trials`) gets new tensors."""
    return index < trials and index % 2 == 1


def ahead_bytes(trials: int, input_bytes: int, output_bytes: int) -> int:
    """The memory every set of a plan of `trials` takes when made ahead (`input_bytes`: one
    input set, `output_bytes`: one set of outputs): the warm-up's and each trial's inputs and
    expected outputs (the recheck's too), the decoys, and the copy an expected output is
    computed on."""
    seeds = trials + 1
    decoys = sum(not reuses_previous_inputs(i, trials) for i in range(seeds))
    sets = 1 + seeds
    return (sets + decoys + 1) * input_bytes + sets * output_bytes


def fresh_seed() -> int:
    return secrets.randbelow(2**31 - 1)


def decoy_seed(seed: int) -> int:
    return (seed * 2654435761 + 12345) % (2**31 - 1)


def copied(inputs: list) -> list:
    """`inputs` with every tensor cloned (scalars as they are)."""
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def expected_outputs(
    reference: Reference, inputs: list, *, copy: bool = True
) -> list[torch.Tensor]:
    """The reference's outputs on a copy of `inputs` (which it may change in place); on
    `inputs` themselves where `copy` is false (a reference that leaves its inputs alone: one
    input set less in memory)."""
    with torch.no_grad():
        return as_outputs(reference.model(*(copied(inputs) if copy else inputs)))


def set_bytes(values: list) -> int:
    return sum(x.numel() * x.element_size() for x in values if isinstance(x, torch.Tensor))


@dataclass
class TrialSet:
    seed: int
    inputs: list
    expected: list[torch.Tensor]
    decoy: list | None


class TrialPlan:
    def __init__(
        self, reference: Reference, device: torch.device, trials: int = 3, *, copies_inputs=True
    ):
        self.reference, self.device = reference, device
        self.copies_inputs = copies_inputs  # the reference changes its inputs: run it on a copy
        self.trials = max(trials, MIN_TRIALS)
        self.seeds = [fresh_seed() for _ in range(self.trials + 1)]  # the recheck's last
        self.made_ahead = False
        self._warm_up: TrialSet | None = None
        self._ahead: dict[int, TrialSet] = {}
        self.held_bytes = 0  # what the sets made ahead take

    def reuses_previous_inputs(self, index: int) -> bool:
        return reuses_previous_inputs(index, self.trials)

    def warm_up(self) -> TrialSet:
        """The set of the stream gate's sizing call: made ahead, or now."""
        made, self._warm_up = self._warm_up, None
        return made or self._make_warm_up()

    def take(self, index: int) -> TrialSet:
        """Trial `index`'s sets: made ahead, or now."""
        return self._ahead.pop(index, None) or self._make_trial(index)

    def make_ahead(self, probe_inputs: list, output_bytes: int, *, abandon: Callable[[], bool]):
        """Make every trial's sets now, when all of them fit in AHEAD_MEMORY_SHARE of the free
        memory and in AHEAD_MAX_BYTES (`probe_inputs`: one input set, `output_bytes`: one set of
        outputs); else leave them to be made one trial's at a time. Stops between sets once
        `abandon()` is true."""
        needed = ahead_bytes(self.trials, set_bytes(probe_inputs), output_bytes)
        if needed > AHEAD_MAX_BYTES or not fits(needed, self.device, share=AHEAD_MEMORY_SHARE):
            return
        self.made_ahead = True
        self.held_bytes = needed
        self._warm_up = self._make_warm_up()
        for index in range(len(self.seeds)):
            if abandon():
                return
            self._ahead[index] = self._make_trial(index)

    def _make_warm_up(self) -> TrialSet:
        return self._make(decoy_seed(decoy_seed(self.seeds[0])), decoy=False)

    def _make_trial(self, index: int) -> TrialSet:
        return self._make(self.seeds[index], decoy=not self.reuses_previous_inputs(index))

    def _make(self, seed: int, *, decoy: bool) -> TrialSet:
        inputs = self.reference.inputs(seed, self.device)
        return TrialSet(
            seed=seed,
            inputs=inputs,
            expected=expected_outputs(self.reference, inputs, copy=self.copies_inputs),
            decoy=self.reference.inputs(decoy_seed(seed), self.device) if decoy else None,
        )
