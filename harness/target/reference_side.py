"""Everything a check needs from its reference and nothing from the candidate (the loaded reference,
the probe's shapes and habits, the trial plan, verification's kernels warmed), made in one go so
it can be made while nvcc builds. Made in the clean reference process with the trials' sets and
in the worker without them. What making it raises is raised by `ready()`, after the build, so a
failed build is still reported as such. Worker side: imports torch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from kernelblaster.harness.target.compare import CHUNK_ELEMENTS, compare, tolerances
from kernelblaster.harness.target.memory import (
    AHEAD_MAX_BYTES,
    PARAMETER_COPIES,
    fits,
    known_problem_bytes,
    verification_bytes,
)
from kernelblaster.harness.target.plain_launch import output_templates
from kernelblaster.harness.target.reference import Reference, as_outputs, load_reference
from kernelblaster.harness.target.tensor_checks import Signature, overlaps
from kernelblaster.harness.target.trial_sets import MIN_TRIALS, TrialPlan, ahead_bytes, set_bytes

if TYPE_CHECKING:
    from kernelblaster.harness.target.clean_reference import CleanReference


@dataclass
class ReferenceHabits:
    aliases_inputs: bool  # returns (a view of) an input as an output
    modifies_inputs: bool  # writes into its inputs


@dataclass
class Probe:
    inputs: list  # get_inputs() under seed 0, on the device
    output_templates: list[torch.Tensor]  # the reference's outputs on them, as meta tensors


def reference_habits(reference: Reference, inputs: list) -> ReferenceHabits:
    """What the reference itself does with `inputs` (which it may change). Whether it changes
    them is told by their signatures before and after (harness/target/tensor_checks.py), not by
    a copy: a problem of gigabytes holds one input set less."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    before = [Signature.of(x) for x in tensors]
    with torch.no_grad():
        outputs = as_outputs(reference.model(*inputs))
    return ReferenceHabits(
        aliases_inputs=any(overlaps(o, x) for o in outputs for x in tensors),
        modifies_inputs=[Signature.of(x) for x in tensors] != before,
    )


def make_probe(reference: Reference, inputs: list) -> Probe:
    """The probe on `inputs`, which must be `reference.inputs(0, device)`."""
    return Probe(inputs=inputs, output_templates=output_templates(reference, inputs))


@dataclass
class ReferenceSide:
    reference: Reference | None = None
    probe: Probe | None = None
    habits: ReferenceHabits | None = None
    plan: TrialPlan | None = None  # None in the worker (`sets=False`)
    clean: CleanReference | None = None  # in the worker: the clean process, its session open
    failure: Exception | None = None  # what making it raised
    ahead: bool = False  # made by a spare before its request came (worker/reference_ahead.py)
    # Wall seconds of its parts: reference_load, reference_probe, reference_sets (every trial's
    # sets made ahead; absent when they were left to their trials).
    seconds: dict[str, float] = field(default_factory=dict)

    def ready(self) -> tuple[Reference, Probe, ReferenceHabits, TrialPlan]:
        """Its parts, the trial plan included; raises what making them raised."""
        reference, probe = self.ready_without_sets()
        assert self.habits and self.plan, "abandoned half-way"
        return reference, probe, self.habits, self.plan

    def ready_without_sets(self) -> tuple[Reference, Probe]:
        """The parts the worker's side has; raises what making them raised."""
        if self.failure is not None:
            raise self.failure
        assert self.reference and self.probe, "abandoned half-way"
        return self.reference, self.probe

    @contextmanager
    def _timed(self, part: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.seconds[part] = round(time.perf_counter() - began, 4)


def _load_check_kernels(templates: list[torch.Tensor], device: torch.device) -> None:
    """Compare outputs of the reference's dtypes and take their signatures, as every trial
    does (harness/check/verify.py), so that the kernels those launch are loaded. At most one
    chunk of each (the comparison runs chunk by chunk, flat): a multi-gigabyte output is not
    allocated again just for this."""
    for template in templates:
        size = min(template.numel(), CHUNK_ELEMENTS)
        ones = torch.ones(size, dtype=template.dtype, device=device)
        atol, rtol = tolerances(ones.dtype, None, None)
        compare(ones, ones, atol=atol, rtol=rtol, output=0, trial=0, seed=0)
        Signature.of(ones)


def prepare_reference_side(
    path: Path,
    device: torch.device,
    *,
    trials: int,
    abandon: Callable[[], bool] = lambda: False,
    sets: bool = True,
) -> ReferenceSide:
    """The reference side of a check of `trials` trials on `device`; without the trials' sets
    unless `sets`. `abandon()` (asked between steps) says the check won't run after all (its
    build failed): it stops there."""
    side = ReferenceSide()
    try:
        with side._timed("reference_load"):
            if device.type == "cuda":  # current: a reference may allocate on "cuda"
                torch.cuda.set_device(device)
            side.reference = load_reference(path, device)
        if abandon():
            return side
        with side._timed("reference_probe"):
            inputs = side.reference.inputs(0, device)
            if sets:  # the worker asks the clean process what the reference does
                side.habits = reference_habits(side.reference, inputs)
                if side.habits.modifies_inputs:  # the probe's must be pristine: drawn again
                    inputs = side.reference.inputs(0, device)
            side.probe = make_probe(side.reference, inputs)
        if sets:
            assert side.habits is not None
            side.plan = TrialPlan(
                side.reference, device, trials, copies_inputs=side.habits.modifies_inputs
            )
            with side._timed("reference_sets"):
                output_bytes = set_bytes(side.probe.output_templates)
                side.plan.make_ahead(side.probe.inputs, output_bytes, abandon=abandon)
            if not side.plan.made_ahead:
                del side.seconds["reference_sets"]
        if device.type == "cuda" and not abandon():
            with side._timed("reference_checks_loaded"):
                _load_check_kernels(side.probe.output_templates, device)
    # Kept, not handled: `ready()` raises it where the check handles what loading a reference
    # and running it raise (a broken reference, out of memory, a CUDA error, a bug).
    except Exception as exc:  # noqa: BLE001 - raised again by ready()
        side.failure = exc
        side.plan = None  # its sets freed before an out-of-memory report measures what's free
    return side


def spare_side_fits(path: Path, device: torch.device, *, trials: int, cache: Path) -> bool:
    """Whether a spare worker may hold the reference side of `path`: what that side holds, beside
    one whole verification of the problem, fits in what is free on `device` now. Each side leaves
    less for the next, so the GPU's memory bounds how many spares hold sides. A problem whose
    size can't be measured is held as before. Sizes are kept under `cache`."""
    sized = known_problem_bytes(path, cache)
    if sized is None:
        return True
    inputs, outputs, parameters = sized
    ahead = ahead_bytes(max(trials, MIN_TRIALS), inputs, outputs)
    if ahead > AHEAD_MAX_BYTES:  # as TrialPlan.make_ahead: none made ahead past the limit
        ahead = 0
    side = PARAMETER_COPIES * parameters + inputs + ahead
    check = verification_bytes(inputs, outputs) + PARAMETER_COPIES * parameters
    return fits(side + check, device, share=1.0)
