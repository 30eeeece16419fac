"""Reference.inputs: get_inputs() makes its tensors on the check's device directly (its factory
calls run with that device as torch's default), and one that needs CPU tensors runs again on the
CPU. The meta device stands in for a GPU here: it takes the same path as "cuda"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness.target.reference import ReferenceError_, load_reference
from tests.harness.target.test_reference_side import (
    INPUTS_FAIL,  # get_inputs() raises, on any device
)

META = torch.device("meta")
CPU = torch.device("cpu")

FACTORY = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
made_on = []
def get_inputs():
    x = torch.randn(8)
    made_on.append(x.device.type)
    return [x, 3]
def get_init_inputs():
    return []
"""
NEEDS_CPU = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    values = torch.randn(8).numpy()  # only a CPU tensor has a numpy view
    return [torch.from_numpy(values * 2)]
def get_init_inputs():
    return []
"""


def _reference(tmp_path: Path, text: str, device: torch.device):
    path = tmp_path / "ref.py"
    path.write_text(text)
    return load_reference(path, device)


def test_get_inputs_makes_its_tensors_on_the_device(tmp_path):
    reference = _reference(tmp_path, FACTORY, META)
    inputs = reference.inputs(0, META)
    assert reference.module.made_on == ["meta"]  # made there, not made on the CPU and copied
    assert inputs[0].device == META and inputs[0].shape == (8,)
    assert inputs[1] == 3  # scalars pass through


def test_a_get_inputs_that_needs_cpu_tensors_runs_again_on_the_cpu(tmp_path):
    reference = _reference(tmp_path, NEEDS_CPU, META)
    (on_device,) = reference.inputs(5, META)
    assert on_device.device == META and on_device.shape == (8,)
    (on_cpu,) = _reference(tmp_path, NEEDS_CPU, CPU).inputs(5, CPU)
    torch.manual_seed(5)
    assert torch.equal(on_cpu, torch.randn(8) * 2)  # the fallback runs under the same seed


def test_a_get_inputs_that_fails_everywhere_is_reported(tmp_path):
    reference = _reference(tmp_path, INPUTS_FAIL, META)
    with pytest.raises(ReferenceError_) as raised:
        reference.inputs(0, META)
    assert raised.value.error.kind == "bad_reference"
    assert "get_inputs() in ref.py failed: no inputs today" in raised.value.error.message
