"""The reference side of a check, made before the candidate exists (CPU, real reference files):
what it holds, how long each part took, and a broken reference's error kept and raised by
`ready()` exactly as loading it in the check raises it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness.target.reference import ReferenceError_, load_reference
from kernelblaster.harness.target.reference_side import prepare_reference_side

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"
CPU = torch.device("cpu")

IN_PLACE = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x.relu_()
def get_inputs():
    return [torch.randn(64)]
def get_init_inputs():
    return []
"""
INPUTS_FAIL = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    raise ValueError("no inputs today")
def get_init_inputs():
    return []
"""
NOT_TENSORS = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return "not a tensor"
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
"""


def test_everything_the_check_needs_from_the_reference():
    side = prepare_reference_side(TARGETS / "relu_ref.py", CPU, trials=3)
    reference, probe, habits, plan = side.ready()
    assert reference.path.name == "relu_ref.py"
    assert torch.equal(probe.inputs[0], reference.inputs(0, CPU)[0])
    (template,) = probe.output_templates
    assert template.device.type == "meta" and template.shape == (1 << 16,)
    assert not habits.aliases_inputs and not habits.modifies_inputs
    assert plan.made_ahead and plan.trials == 3
    assert set(side.seconds) == {"reference_load", "reference_probe", "reference_sets"}


def test_the_habits_come_from_pristine_inputs(tmp_path):
    # relu_ in place is idempotent: on inputs it had changed already it would seem not to
    path = tmp_path / "in_place_ref.py"
    path.write_text(IN_PLACE)
    _, probe, habits, _ = prepare_reference_side(path, CPU, trials=3).ready()
    assert habits.aliases_inputs and habits.modifies_inputs
    assert probe.output_templates[0].shape == (64,)


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("broken", "broken on purpose"),
        (INPUTS_FAIL, "get_inputs() in"),
        ("class Model: pass\n", "lacks get_inputs, get_init_inputs"),
    ],
)
def test_a_broken_reference_is_raised_where_the_check_meets_it(tmp_path, source, words):
    if source == "broken":
        path = TARGETS / "bad_reference_kernel.py"
    else:
        path = tmp_path / "broken_ref.py"
        path.write_text(source)
    side = prepare_reference_side(path, CPU, trials=3)
    with pytest.raises(ReferenceError_) as raised:
        side.ready()
    assert raised.value.error.kind == "bad_reference" and words in raised.value.error.message
    if source != INPUTS_FAIL:  # loading it is what fails: the same error as loading it now
        with pytest.raises(ReferenceError_) as direct:
            load_reference(path, CPU)
        assert direct.value.error == raised.value.error


def test_other_failures_are_raised_as_they_were(tmp_path):
    path = tmp_path / "not_tensors_ref.py"
    path.write_text(NOT_TENSORS)
    side = prepare_reference_side(path, CPU, trials=3)
    assert side.reference is not None  # kept for the out-of-memory report's sizes
    with pytest.raises(TypeError, match="forward\\(\\) returned str"):
        side.ready()


def test_abandoned_after_the_load_it_makes_nothing_more():
    side = prepare_reference_side(TARGETS / "relu_ref.py", CPU, trials=3, abandon=lambda: True)
    assert side.reference is not None and side.probe is None and side.plan is None
    assert side.failure is None and set(side.seconds) == {"reference_load"}
