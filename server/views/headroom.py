"""Headroom against the roof that limits the kernel's state, as the lens and the hover show it.

The classifier's `Headroom` is the roof the kernel is closest to, as in a roofline; that is the
limit only of a memory- or compute-bound kernel. A launch-bound kernel is limited by how much
of the GPU its grid fills, an occupancy-bound one by its warps in flight, and a latency-bound
one by no roof at all: "5% of the DRAM bandwidth roof" would point such a kernel at bandwidth
when the fix is parallelism. Pure, from the state and the kernel's profile."""

from __future__ import annotations

from dataclasses import dataclass

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.findings import stall_shares, tail_fraction
from kernelblaster.harness.protocol.records import KernelProfile, PerfState

ROOF_WORDS = {
    "dram_bandwidth": "DRAM bandwidth",
    "fp32": "FP32",
    "fp16_tensor": "FP16 tensor",
    "fp64": "FP64",
    "sm_throughput": "SM throughput",
}
_MEMORY_UNITS = {"memory.l1": ("L1", "l1_throughput_pct"), "memory.l2": ("L2", "l2_throughput_pct")}


@dataclass(frozen=True)
class LimitingRoof:
    """`short`: the lens's few words ("grid 2% of a wave", "DRAM 86% of peak"); `line`: the
    hover's sentence saying what the figure is and why this roof; `roof`: what limits the
    kernel ("DRAM bandwidth", "parallelism", "occupancy", "none")."""

    roof: str
    short: str
    line: str


def limiting_roof(state: PerfState, profile: KernelProfile | None) -> LimitingRoof:
    metrics = profile.metrics if profile is not None else {}
    if state.bottleneck == "memory":
        return _memory(state)
    if state.bottleneck == "compute":
        return _compute(state)
    if state.bottleneck == "launch":
        return _launch(state, profile, metrics)
    if state.bottleneck == "occupancy":
        return _occupancy(state)
    return _latency(state, profile)


def _memory(state: PerfState) -> LimitingRoof:
    if state.state in _MEMORY_UNITS:
        unit, key = _MEMORY_UNITS[state.state]
        value = state.metrics.get(key)
        if value is not None:
            return LimitingRoof(
                roof=f"{unit} throughput",
                short=f"{unit} {value / 100:.0%} of peak",
                line=f"Headroom: {unit} runs at {value / 100:.0%} of its peak throughput (ncu), "
                f"the unit that limits this memory-bound kernel.",
            )
    headroom = state.headroom
    if headroom is not None and headroom.roof == "dram_bandwidth":
        fraction = headroom.achieved_fraction
    elif (dram := state.metrics.get("dram_throughput_pct")) is not None:
        fraction = dram / 100
    else:
        return _none("memory-bound, but the profile has no DRAM throughput")
    return LimitingRoof(
        roof="DRAM bandwidth",
        short=f"DRAM {fraction:.0%} of peak",
        line=f"Headroom: the kernel moves {fraction:.0%} of the DRAM bandwidth roof "
        "(achieved bytes/s over the peak); memory-bound, so DRAM is its roof.",
    )


def _compute(state: PerfState) -> LimitingRoof:
    headroom = state.headroom
    if headroom is not None and headroom.roof in ("fp32", "fp64", "fp16_tensor", "sm_throughput"):
        words = ROOF_WORDS[headroom.roof]
        peak = "" if headroom.roof == "sm_throughput" else " peak"
        unit = words.removesuffix(" throughput")
        return LimitingRoof(
            roof=words,
            short=f"{unit} {headroom.achieved_fraction:.0%} of peak",
            line=f"Headroom: the kernel reaches {headroom.achieved_fraction:.0%} of the {words}"
            f"{peak} (achieved FLOP/s or the pipe's utilization, whichever is higher); "
            "compute-bound, so that is its roof.",
        )
    if (sm := state.metrics.get("sm_throughput_pct")) is not None:
        return LimitingRoof(
            roof="SM throughput",
            short=f"SM {sm / 100:.0%} of peak",
            line=f"Headroom: the SM runs at {sm / 100:.0%} of its peak throughput (ncu); "
            "compute-bound, and no single FLOP pipe shows the limit.",
        )
    return _none("compute-bound, but the profile has no SM throughput")


def _launch(
    state: PerfState, profile: KernelProfile | None, metrics: dict[str, float]
) -> LimitingRoof:
    waves = metrics.get(m.WAVES)
    if state.state == "launch.small_grid" and waves is not None:
        return LimitingRoof(
            roof="parallelism",
            short=f"grid {_percent(waves)} of a wave",
            line=f"Headroom: the grid fills {_percent(waves)} of one wave (the blocks all SMs "
            "hold at once); launch-bound, so the roof is parallelism: more blocks, not bandwidth.",
        )
    if state.state == "launch.tail_effect" and (tail := tail_fraction(waves)) > 0:
        return LimitingRoof(
            roof="parallelism",
            short=f"tail wave ~{tail:.0%} of time",
            line=f"Headroom: a partial last wave may take ~{tail:.0%} of the runtime with most "
            "SMs idle; launch-bound, so the roof is parallelism: a grid of whole waves.",
        )
    if profile is not None and profile.duration_ns is not None:
        micro = profile.duration_ns / 1e3
        return _none(f"a {micro:.1f} µs kernel is dominated by its launch and ramp-up")
    return _none("launch-bound")


def _occupancy(state: PerfState) -> LimitingRoof:
    achieved = state.metrics.get("achieved_occupancy_pct")
    theoretical = state.metrics.get("theoretical_occupancy_pct")
    if achieved is None:
        return _none("occupancy-bound, but the profile has no achieved occupancy")
    of = f" (theoretical {theoretical / 100:.0%})" if theoretical is not None else ""
    return LimitingRoof(
        roof="occupancy",
        short=f"occupancy {achieved / 100:.0%}",
        line=f"Headroom: {achieved / 100:.0%} of the SMs' warp slots are in use{of}; "
        "occupancy-bound, so the roof is warps in flight, not a throughput.",
    )


def _latency(state: PerfState, profile: KernelProfile | None) -> LimitingRoof:
    sm, memory = state.metrics.get("sm_throughput_pct"), state.metrics.get("memory_throughput_pct")
    busy = (
        f"SM {sm:.0f}%, memory {memory:.0f}% of peak"
        if sm is not None and memory is not None
        else "neither unit busy"
    )
    top = next(iter(stall_shares(profile).items()), None) if profile is not None else None
    waits = f"; warps wait on {top[0].replace('_', ' ')}" if top is not None else ""
    return _none(f"latency-bound ({busy}{waits}): no throughput roof is what limits it")


def _percent(fraction: float) -> str:
    """ "2%", "0.4%": a tiny grid's share of a wave is not 0%."""
    if fraction >= 0.01:
        return f"{fraction:.0%}"
    return f"{fraction:.1%}" if fraction >= 0.001 else "<0.1%"


def _none(why: str) -> LimitingRoof:
    line = f"Headroom: none applies — {why}."
    return LimitingRoof(roof="none", short="no roof applies", line=line)
