"""Issue 32's memory rules, on the CPU: the checks verification makes on every call hold no
temporary larger than a chunk beside multi-gigabyte tensors (counted by a dispatch hook on every
new tensor), and bench/memory.py puts each memory sample in the phase the worker was in."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelblaster.harness.target import compare, tensor_checks
from kernelblaster.harness.target.compare import all_finite
from kernelblaster.harness.target.memory import return_cached
from kernelblaster.harness.target.tensor_checks import same_bits


class LargestNewTensor(TorchDispatchMode):
    """The bytes of the largest tensor any op makes in new memory (views don't count), and
    the ops called."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.ops: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func)
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(tensor_checks, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 256)


def test_same_bits_holds_a_chunk_of_mask_at_a_time(small_chunks):
    a = torch.rand(64, 1024)  # 256 KiB
    b = a.clone()
    with LargestNewTensor() as seen:
        assert same_bits(a, b)
    assert seen.largest <= 1024
    # not torch.equal: on a GPU it is eq(a, b).all(), a mask as large as the tensor (on the
    # CPU it makes none, so the hook could not see it)
    assert torch.ops.aten.equal.default not in seen.ops
    b[63, 1023] = float("nan")  # the last chunk's last element
    with LargestNewTensor() as seen:
        assert not same_bits(a, b)
    assert seen.largest <= 1024
    poisoned = torch.full((64, 1024), float("nan"))
    assert same_bits(poisoned, poisoned.clone())  # NaN where NaN is: the same bits


def test_same_bits_of_strided_tensors_still_compares_every_element(small_chunks):
    a = torch.rand(64, 64)
    assert same_bits(a.t(), a.clone().t())
    changed = a.clone()
    changed[5, 7] += 1
    assert not same_bits(a.t(), changed.t())


def test_all_finite_holds_a_chunk_of_mask_at_a_time(small_chunks):
    values = torch.rand(64, 1024)
    with LargestNewTensor() as seen:
        assert all_finite(values)
    chunk = 256 * values.element_size()  # isfinite's own temporaries: a chunk of the values
    assert seen.largest <= chunk  # not the whole tensor's mask (64 KiB of bools)
    values[63, 1023] = float("inf")
    with LargestNewTensor() as seen:
        assert not all_finite(values)
    assert seen.largest <= chunk


def test_memory_samples_fall_in_the_phase_the_worker_was_in():
    from bench import memory

    Sample = memory.Sample
    marks = [(2.0, "verify: trial 1 of 3"), (1.0, "verify: the stream gate's sizing call")]
    samples = [
        Sample(0.5, {10: 100}, 1100),
        Sample(1.5, {10: 300, 11: 200}, 1600),
        Sample(1.7, {10: 200, 11: 400}, 1700),
        Sample(2.5, {10: 250, 11: 700}, 2050),
    ]
    roles = {10: "worker", 11: "clean_reference"}
    peaks = memory.peaks_by_phase(samples, marks, 1000, roles)
    assert peaks == {
        "starting": {"processes": 100, "device": 100, "worker": 100},
        "verify: the stream gate's sizing call": {
            "processes": 600,  # the most at once: 200 + 400, not 300 + 400
            "device": 700,
            "worker": 300,
            "clean_reference": 400,
        },
        "verify: trial 1 of 3": {
            "processes": 950,
            "device": 1050,
            "worker": 250,
            "clean_reference": 700,
        },
    }


def test_cached_blocks_go_back_between_trials_only_for_sets_made_per_trial(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    gpu = torch.device("cuda", 0)
    return_cached(gpu, sets_per_trial=False)  # small: its sets made ahead, blocks reused
    return_cached(torch.device("cpu"), sets_per_trial=True)
    assert emptied == []
    return_cached(gpu, sets_per_trial=True)
    assert emptied == [True]
