"""The headroom the lens and hover show is measured against the roof that limits the kernel's
state (server/views/headroom.py): real H100/H200 profiles for the states they hold, built
states for the others."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.analysis.ncu_metrics import WAVES
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import Headroom, KernelProfile, PerfState
from kernelblaster.server.views.headroom import limiting_roof

NCU = Path(__file__).resolve().parents[2] / "fixtures" / "ncu"


def _profiled(report: str, kernel: str) -> tuple[PerfState, KernelProfile]:
    profile = read_report(NCU / report, depth="full")
    launch = next(k for k in profile.kernels if k.name == kernel)
    return classify(launch, arch=profile.arch, device=profile.device), launch


def test_a_launch_bound_kernel_is_measured_against_parallelism_not_dram():
    # softmax_rowthread on the H100: 32 blocks, 0.02 waves; DRAM at 5%, its nearest roof
    state, profile = _profiled("h100-examples/softmax.ncu-rep", "softmax_rowthread")
    assert state.state == "launch.small_grid"
    assert state.headroom is not None and state.headroom.roof == "dram_bandwidth"
    roof = limiting_roof(state, profile)
    assert roof.roof == "parallelism"
    assert roof.short == "grid 2% of a wave"
    assert "DRAM" not in roof.line and "more blocks" in roof.line


def test_a_tiny_grid_is_not_rounded_to_nothing():
    state, profile = _profiled("h200-states/states.ncu-rep", "tiny_grid")
    assert state.state == "launch.small_grid"
    short = limiting_roof(state, profile).short
    assert short.startswith("grid ") and "grid 0% " not in short


@pytest.mark.parametrize(
    ("report", "kernel", "state", "roof", "short"),
    [
        # L2 limits it (87%); DRAM, its nearest roof, is at 13%
        ("h100-five/five.ncu-rep", "transpose_naive", "memory.l2", "L2 throughput", "L2 87%"),
        ("h100-five/five.ncu-rep", "divergent", "compute.fp32", "FP32", "FP32 68%"),
        ("h200-states/states.ncu-rep", "fill_float", "occupancy.achieved", "occupancy", "occ"),
    ],
)
def test_memory_compute_and_occupancy_bound_kernels_get_their_own_roof(
    report, kernel, state, roof, short
):
    perf, profile = _profiled(report, kernel)
    assert perf.state == state
    limit = limiting_roof(perf, profile)
    assert limit.roof == roof and limit.short.startswith(short), limit


def _launch(*, duration_ns: float, waves: float) -> KernelProfile:
    """The H100 softmax launch with another duration and number of waves."""
    _, profile = _profiled("h100-examples/softmax.ncu-rep", "softmax_rowthread")
    metrics = {**profile.metrics, WAVES: waves}
    return msgspec.structs.replace(profile, duration_ns=duration_ns, metrics=metrics)


def _state(bottleneck, state, *, headroom=None, **metrics) -> PerfState:
    return PerfState(
        kernel="k",
        arch="sm_90",
        bottleneck=bottleneck,
        state=state,
        summary=f"{bottleneck}-bound",
        headroom=headroom,
        metrics=metrics,
    )


def test_a_dram_bound_kernel_is_measured_against_the_dram_roof():
    state = _state(
        "memory", "memory.dram", headroom=Headroom(roof="dram_bandwidth", achieved_fraction=0.86)
    )
    limit = limiting_roof(state, None)
    assert (limit.roof, limit.short) == ("DRAM bandwidth", "DRAM 86% of peak")
    assert "86% of the DRAM bandwidth roof" in limit.line


def test_a_compute_bound_kernel_whose_nearest_roof_is_dram_uses_the_sm():
    state = _state(
        "compute",
        "compute.issue",
        headroom=Headroom(roof="dram_bandwidth", achieved_fraction=0.3),
        sm_throughput_pct=72.0,
    )
    assert limiting_roof(state, None).short == "SM 72% of peak"


def test_latency_bound_and_launch_overhead_say_why_no_roof_applies():
    latency = _state(
        "latency",
        "latency.long_scoreboard",
        headroom=Headroom(roof="dram_bandwidth", achieved_fraction=0.05),
        sm_throughput_pct=12.0,
        memory_throughput_pct=20.0,
    )
    limit = limiting_roof(latency, None)
    assert (limit.roof, limit.short) == ("none", "no roof applies")
    assert "SM 12%, memory 20% of peak" in limit.line
    short = _launch(duration_ns=3000.0, waves=2.0)
    overhead = limiting_roof(_state("launch", "launch.overhead"), short)
    assert overhead.roof == "none" and "3.0 µs kernel" in overhead.line


def test_a_tail_effect_is_measured_by_its_last_wave():
    profile = _launch(duration_ns=1e6, waves=1.5)
    limit = limiting_roof(_state("launch", "launch.tail_effect"), profile)
    assert (limit.roof, limit.short) == ("parallelism", "tail wave ~50% of time")
