"""Runtime patches a candidate makes (timers, synchronize, torch ops, the harness's own
functions) are named and undone; torch's own lazy wrappers are not reported."""

import functools
import subprocess
import sys
import time

import pytest
import torch

from kernelblaster.harness.check.integrity import RuntimeSnapshot
from kernelblaster.harness.target import compare as compare_module


@pytest.fixture
def snapshot():
    snap = RuntimeSnapshot()
    yield snap
    snap.restore()  # whatever a test left patched


def test_an_untouched_runtime_has_no_changes(snapshot):
    assert snapshot.changes() == []


def test_timer_and_event_patches_are_named_and_restored(snapshot):
    real_perf_counter, real_elapsed = time.perf_counter, torch.cuda.Event.elapsed_time
    time.perf_counter = lambda: 0.0
    torch.cuda.Event.elapsed_time = lambda self, end: 0.001
    torch.cuda.synchronize = lambda device=None: None
    assert set(snapshot.changes()) == {
        "time.perf_counter",
        "torch.cuda.Event.elapsed_time",
        "torch.cuda.synchronize",
    }
    snapshot.restore()
    assert snapshot.changes() == []
    assert time.perf_counter is real_perf_counter
    assert torch.cuda.Event.elapsed_time is real_elapsed


def test_patching_an_op_the_reference_calls_or_the_harness_is_named(snapshot):
    torch.relu = lambda x: x
    torch.Tensor.relu = lambda self: self
    compare_module.compare = lambda *args, **kwargs: None
    del torch.nn.functional.gelu
    assert set(snapshot.changes()) == {
        "torch.relu",
        "torch.Tensor.relu",
        "torch.nn.functional.gelu",
        "kernelblaster.harness.target.compare.compare",
    }
    snapshot.restore()
    assert torch.relu(torch.tensor([-1.0])).item() == 0.0
    assert snapshot.changes() == []


def test_seeding_patched_to_repeat_inputs_is_named(snapshot):
    # a constant seed would make every "fresh" input set the same one, so a cache would pass
    torch.manual_seed = lambda seed: None
    assert snapshot.changes() == ["torch.manual_seed"]


def test_a_wrapper_dressed_as_torchs_is_still_a_patch(snapshot):
    real = torch.manual_seed

    @functools.wraps(real)  # copies __module__ and sets __wrapped__, as torch's wrappers do
    def always_zero(seed):
        return real(0)

    torch.manual_seed = always_zero
    assert snapshot.changes() == ["torch.manual_seed"]


def test_torch_wrapping_its_own_functions_is_not_a_patch(snapshot):
    import torch._dynamo  # noqa: F401 - wraps torch.manual_seed (the CUDA profiler imports it)

    assert snapshot.changes() == []


def test_new_attributes_are_not_changes(snapshot):
    torch.cuda.some_new_helper = lambda: None
    try:
        assert snapshot.changes() == []
    finally:
        del torch.cuda.some_new_helper


def test_a_snapshot_taken_before_the_harness_is_imported_still_guards_it():
    # the worker snapshots before a KernelBench solution's build imports it, when check and
    # verify may not be imported yet
    script = (
        "from kernelblaster.harness.check.integrity import RuntimeSnapshot\n"
        "snapshot = RuntimeSnapshot()\n"
        "import kernelblaster.harness.check.verify as verify\n"
        "verify.Verifier.verify = lambda self, trials=3: None\n"
        "print(snapshot.changes())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['kernelblaster.harness.check.verify.Verifier.verify']"
