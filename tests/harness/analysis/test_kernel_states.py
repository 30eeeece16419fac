"""One rule for which launch describes a kernel launched several times, shared by the editor
(server/results/cache.py) and the optimization loop (agents/loop/evaluation.py): its longest launch.
Built from the real H200 report of three naive kernels, two of them relaunched under one name."""

from __future__ import annotations

import msgspec
import pytest

from kernelblaster.agents.loop.evaluation import launched_kernels
from kernelblaster.harness.analysis.classify import classify_report, kernel_states
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.server.results.cache import FileResult
from tests.tests_paths import REPO

H200 = REPO / "tests" / "fixtures" / "ncu" / "h200-naive3" / "probe.ncu-rep"


@pytest.fixture(scope="module")
def report():
    return read_report(H200)


def _relaunched(report, first: str, second: str, durations: tuple[float | None, float | None]):
    """`first` then `second` (real kernels of the report, different states), both as `k`."""
    by_name = {kernel.name: kernel for kernel in report.kernels}
    kernels = [
        msgspec.structs.replace(by_name[name], name="k", duration_ns=duration)
        for name, duration in zip((first, second), durations, strict=True)
    ]
    relaunched = msgspec.structs.replace(report, kernels=kernels)
    return relaunched, classify_report(relaunched)


def test_the_states_differ_between_the_two_kernels(report):
    states = {state.kernel: state.state for state in classify_report(report)}
    assert states["relu_naive"] != states["softmax_rowthread"]


@pytest.mark.parametrize("durations", [(100.0, 500.0), (500.0, 100.0)])
def test_the_longest_launch_names_the_state_in_the_editor_and_the_loop(report, durations):
    relaunched, states = _relaunched(report, "relu_naive", "softmax_rowthread", durations)
    longest = states[durations.index(max(durations))]

    assert kernel_states(relaunched, states) == {"k": longest}
    response = WorkerResponse(profile=relaunched, states=states)
    result = FileResult(source="/x/k.cu", text_hash="h", time=0.0, response=response)
    assert result.states["k"].state == longest.state
    ((launched, state),) = launched_kernels(relaunched, states)
    assert (launched.state, launched.launches, launched.time_share) == (longest.state, 2, 1.0)
    assert state == longest


def test_without_durations_the_first_launch_stands(report):
    relaunched, states = _relaunched(report, "softmax_rowthread", "relu_naive", (None, None))
    assert kernel_states(relaunched, states) == {"k": states[0]}
