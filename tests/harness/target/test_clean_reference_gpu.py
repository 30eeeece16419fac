"""The clean reference process on a GPU: a trial's inputs arrive as CUDA IPC handles (the child's
memory, no copy), the candidate's outputs are compared there, and an ATen CUDA kernel
registered in this process changes nothing of what the child computes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.target.clean_reference import CleanReference

pytestmark = pytest.mark.gpu

RELU = Path(__file__).resolve().parents[2] / "fixtures" / "targets" / "relu_ref.py"


@pytest.fixture(scope="module")
def clean():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    process = CleanReference("cuda:0")
    yield process
    process.close()


def test_inputs_are_the_childs_memory_and_outputs_are_compared_there(clean):
    clean.open(RELU, trials=3, atol=None, rtol=None)
    facts = clean.facts()
    assert clean.pid != os.getpid() and facts.ahead_bytes > 0  # relu's sets are small
    trial = clean.take(0)
    (x,) = trial.inputs
    assert x.is_cuda and trial.decoy is not None and trial.decoy[0].is_cuda
    allocated = torch.cuda.memory_allocated()
    right = torch.relu(x)
    assert torch.cuda.memory_allocated() - allocated == right.numel() * 4  # x is not ours
    assert clean.compare(trial.expected.key, [right], trial=0, seed=trial.seed) == []
    (wrong,) = clean.compare(trial.expected.key, [right * 0], trial=0, seed=trial.seed)
    assert wrong.bad_elements > 0
    clean.release(trial.expected.key)


def test_an_aten_kernel_registered_here_does_not_reach_the_child(clean):
    clean.open(RELU, trials=3, atol=None, rtol=None)
    library = torch.library.Library("aten", "IMPL")
    library.impl("relu", lambda x: torch.zeros_like(x), "CUDA")
    try:
        trial = clean.take(1)
        (x,) = trial.inputs
        assert float(torch.relu(x).abs().sum()) == 0.0  # tampered here
        (wrong,) = clean.compare(
            trial.expected.key, [torch.relu(x)], trial=1, seed=trial.seed
        )  # the child's answer is the real relu
        assert wrong.bad_elements > 0
        clean.release(trial.expected.key)
    finally:
        library._destroy()


def test_a_large_problem_holds_one_trials_sets(clean, tmp_path):
    big = tmp_path / "big_ref.py"
    big.write_text(
        RELU.read_text().replace("n = 1 << 16", "n = 1 << 28")  # 1 GiB per set
    )
    clean.open(big, trials=3, atol=None, rtol=None)
    assert clean.facts().ahead_bytes == 0  # each set made when its trial starts
    clean.end_session()
