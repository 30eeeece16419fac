"""Verification's kernel watch (harness/check/kernel_watch.py) without a GPU: where the CUPTI watch
can't be had (no settings to build the counter library with, no nvcc to build it, or, on this
machine, CUPTI refusing the subscription without a driver), the call is watched through
torch.profiler, run once, and the watch says why. torch.profiler's CUDA activity needs a GPU:
here it is replaced by a recorder of what it was asked to watch (test_kernel_watch_gpu.py runs
the real one)."""

from __future__ import annotations

import ctypes.util
import shutil

import pytest
import torch

from kernelblaster.harness.check import kernel_watch
from kernelblaster.harness.check.kernel_watch import KernelWatch
from kernelblaster.settings import Settings

CPU = torch.device("cpu")


@pytest.fixture
def profiled(monkeypatch) -> list:
    """The calls torch.profiler was asked to watch; it 'sees' one kernel per call."""
    calls: list = []

    def through_profiler(call, inputs, device):
        calls.append(call(inputs))
        return {"seen_by_kineto"}

    monkeypatch.setattr(kernel_watch, "through_profiler", through_profiler)
    return calls


def test_without_settings_the_call_is_watched_by_torch_profiler(profiled):
    watch = KernelWatch()
    assert watch.launched(lambda inputs: ["out"], [], CPU) == {"seen_by_kineto"}
    assert profiled == [["out"]]  # called once, under the profiler
    assert watch.way == "torch.profiler" and "no settings" in watch.why_profiler


def test_a_counter_library_that_cannot_be_built_says_so(profiled, tmp_path):
    watch = KernelWatch(Settings(cache_dir=str(tmp_path), nvcc=str(tmp_path / "no-nvcc")))
    assert watch.launched(lambda inputs: [], [], CPU) == {"seen_by_kineto"}
    assert watch.way == "torch.profiler"
    assert watch.why_profiler.startswith("the counter library is not available: ")
    assert "CUPTI" in watch.why_profiler and len(profiled) == 1


@pytest.mark.nvcc
@pytest.mark.skipif(
    ctypes.util.find_library("cuda") is not None, reason="a driver is here: CUPTI subscribes"
)
def test_cupti_refusing_the_subscription_leaves_the_call_to_torch_profiler(profiled, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    calls = []
    watch = KernelWatch(Settings(cache_dir=str(tmp_path)))
    launched = watch.launched(lambda inputs: calls.append(inputs) or [], ["x"], CPU)
    assert launched == {"seen_by_kineto"}
    assert calls == [["x"]]  # not run under the refused watch, run once under the profiler
    assert watch.way == "torch.profiler"
    assert watch.why_profiler.startswith("CUPTI refused the watch: ")
    assert "cuptiSubscribe" in watch.why_profiler
