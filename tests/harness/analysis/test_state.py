"""The classifier on real ncu reports: bottleneck, state, findings, lines, headroom."""

from __future__ import annotations

import msgspec
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.analysis.findings import unit_utilizations
from kernelblaster.harness.profile.ncu import QUICK_METRICS, QUICK_SECTIONS
from kernelblaster.harness.protocol.records import KernelProfile, LaunchConfig
from kernelblaster.kb.catalog import load_catalog
from tests.harness.profile_cases import (
    CASES,
    KERNEL_CASES,
    kernel_case_id,
    load,
    quick_metric_names,
)

# The finding ids the classifier may report: the catalog's, which owns the vocabulary.
VOCABULARY = {finding.id for finding in load_catalog().finding}


def _kernel(case, name: str) -> KernelProfile:
    # A kernel launched several times (the states program's fill_half) is judged by its first
    # launch; the expectations name each kernel once.
    return next(k for k in load(case.report).kernels if k.name == name)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_kernel_in_the_report_has_an_expectation(case):
    names = sorted({kernel.name for kernel in load(case.report).kernels})
    assert names == sorted(expected.name for expected in case.kernels)


@pytest.mark.parametrize(("case", "expected"), KERNEL_CASES, ids=kernel_case_id)
def test_kernel_is_classified_as_expected(case, expected):
    report = load(case.report)
    state = classify(_kernel(case, expected.name), arch=report.arch, device=report.device)
    found = {finding.id for finding in state.findings}
    assert (state.bottleneck, state.state) == (expected.bottleneck, expected.state), state.summary
    assert expected.findings <= found, f"missing {expected.findings - found}: {state.summary}"
    assert not expected.absent & found, f"unexpected {expected.absent & found}"
    assert found <= VOCABULARY | {f for f in found if f.startswith("stall_")}
    if expected.roof is not None:
        assert state.headroom is not None and state.headroom.roof == expected.roof
    assert state.summary.startswith(f"{expected.bottleneck}-bound")
    assert state.arch == report.arch == "sm_90"


@pytest.mark.parametrize(("case", "expected"), KERNEL_CASES, ids=kernel_case_id)
def test_findings_blame_the_lines_that_do_it(case, expected):
    report = load(case.report)
    state = classify(_kernel(case, expected.name), arch=report.arch)
    by_id = {finding.id: finding for finding in state.findings}
    if case.source is None:
        assert all(not finding.lines for finding in state.findings)
        return
    source_lines = case.source.read_text(encoding="utf-8").splitlines()
    for finding_id, text in expected.lines.items():
        lines = by_id[finding_id].lines
        assert lines, f"{finding_id} names no line"
        for line in lines:
            assert text in source_lines[line - 1], f"{case.source.name}:{line} for {finding_id}"


def test_evidence_and_ncu_estimates_come_with_findings():
    (case,) = [c for c in CASES if c.name == "h100-five"]
    state = classify(_kernel(case, "transpose_naive"), arch="sm_90")
    uncoalesced = state.findings[0]
    assert uncoalesced.id == "uncoalesced_global_access"  # the largest ncu estimate comes first
    assert uncoalesced.evidence[m.BYTES_PER_SECTOR_STORE] == 4.0
    assert uncoalesced.evidence[m.BYTES_PER_SECTOR_LOAD] == 32.0
    assert uncoalesced.estimated_speedup == pytest.approx(77.2, abs=0.1)
    assert "stores use 4 of 32 bytes per sector" in state.summary
    hog = _kernel(case, "register_hog")
    register_hog = classify(hog, arch="sm_90")
    limited = next(f for f in register_hog.findings if f.id == "occupancy_limited_registers")
    assert limited.evidence[m.THEORETICAL_OCCUPANCY] == 50.0
    assert limited.evidence[m.REGISTERS] == 56.0
    # ncu estimates 50%; the issue slots already run at 70% of their peak (the SM too), so
    # more warps can save at most 30% of the time
    occupancy_rule = next(r for r in hog.rules if r.id == "TheoreticalOccupancy")
    assert occupancy_rule.estimated_speedup == 50.0
    busiest = max(unit_utilizations(hog).items(), key=lambda item: item[1])
    assert busiest == ("issue slots", pytest.approx(70.0, abs=0.1))
    assert limited.estimated_speedup == pytest.approx(100.0 - busiest[1])
    assert "theoretical occupancy 50%" in limited.message


def test_hover_metrics_are_the_key_few():
    (case,) = [c for c in CASES if c.name == "h200-naive3"]
    state = classify(_kernel(case, "softmax_rowthread"), arch="sm_90")
    assert set(state.metrics) == {
        "duration_us",
        "sm_throughput_pct",
        "memory_throughput_pct",
        "dram_throughput_pct",
        "l1_throughput_pct",
        "l2_throughput_pct",
        "achieved_occupancy_pct",
        "theoretical_occupancy_pct",
        "registers_per_thread",
    }
    assert state.metrics["achieved_occupancy_pct"] == pytest.approx(6.2, abs=0.05)
    assert state.metrics["duration_us"] == pytest.approx(477.0, abs=0.5)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_classification_is_deterministic_across_the_cache_boundary(case):
    report = load(case.report)
    for kernel in report.kernels:
        first = classify(kernel, arch=report.arch)
        again = msgspec.json.decode(msgspec.json.encode(kernel), type=KernelProfile)
        assert msgspec.json.encode(classify(again, arch=report.arch)) == msgspec.json.encode(first)


def _quick(case, kernel: KernelProfile) -> KernelProfile:
    """The kernel as a quick pass sees it: the quick sections' metrics and rules, no markers."""
    available = quick_metric_names(case.report, kernel.name) | set(QUICK_METRICS)
    metrics = {
        name: value
        for name, value in kernel.metrics.items()
        if name in available or name.startswith("launch__") or m.STALL.fullmatch(name)
    }
    rules = [rule for rule in kernel.rules if rule.section in QUICK_SECTIONS]
    return msgspec.structs.replace(kernel, metrics=metrics, rules=rules, markers=[])


@pytest.mark.parametrize(("case", "expected"), KERNEL_CASES, ids=kernel_case_id)
def test_quick_depth_degrades_gracefully(case, expected):
    full_kernel = _kernel(case, expected.name)
    quick_kernel = _quick(case, full_kernel)
    assert len(quick_kernel.metrics) < len(full_kernel.metrics)
    full = classify(full_kernel, arch="sm_90")
    quick = classify(quick_kernel, arch="sm_90")
    assert (quick.bottleneck, quick.state) == (full.bottleneck, full.state)
    found = {finding.id for finding in quick.findings}
    assert found <= {finding.id for finding in full.findings}
    assert all(not finding.lines for finding in quick.findings)
    # coalescing still shows at quick depth, from the bytes-per-sector metrics it adds
    if "uncoalesced_global_access" in expected.findings:
        assert "uncoalesced_global_access" in found


def test_quick_depth_loses_the_roofline_but_keeps_source_counters():
    (case,) = [c for c in CASES if c.name == "h100-five"]
    quick = classify(_quick(case, _kernel(case, "wmma_gemm")), arch="sm_90")
    full = classify(_kernel(case, "wmma_gemm"), arch="sm_90")
    assert full.headroom is not None and full.headroom.roof == "fp16_tensor"
    # no FLOP metrics at quick depth: the tensor roof comes from the tensor pipe's utilization
    tensor_pipe = _kernel(case, "wmma_gemm").metrics[m.PIPES["tensor"]] / 100.0
    assert quick.headroom is not None and quick.headroom.roof == "fp16_tensor"
    assert quick.headroom.achieved_fraction == pytest.approx(tensor_pipe)
    assert tensor_pipe < 0.1 and not quick.near_limit
    # SourceCounters is in the quick set (line diagnostics on every save), so ncu's estimate
    # for the uncoalesced accesses survives the quick pass.
    uncoalesced = next(f for f in quick.findings if f.id == "uncoalesced_global_access")
    full_uncoalesced = next(f for f in full.findings if f.id == "uncoalesced_global_access")
    assert uncoalesced.estimated_speedup == full_uncoalesced.estimated_speedup


def test_near_limit_when_a_roof_is_reached():
    (case,) = [c for c in CASES if c.name == "h200-naive3"]
    relu = _kernel(case, "relu_naive")
    peak = relu.metrics[m.DRAM_BYTES_PEAK_PER_CYCLE] * relu.metrics[m.DRAM_CYCLES_PER_SECOND]
    at_roof = msgspec.structs.replace(
        relu, metrics={**relu.metrics, m.DRAM_BYTES_PER_SECOND: 0.93 * peak}
    )
    state = classify(at_roof, arch="sm_90")
    assert state.headroom is not None
    assert (state.headroom.roof, round(state.headroom.achieved_fraction, 2)) == (
        "dram_bandwidth",
        0.93,
    )
    assert state.near_limit
    assert "93% of the DRAM roof" in state.summary
    assert not classify(relu, arch="sm_90").near_limit


def test_a_profile_without_metrics_still_gets_a_state():
    bare = KernelProfile(
        name="k",
        demangled="k()",
        launch=LaunchConfig(grid=[1, 1, 1], block=[32, 1, 1], registers_per_thread=8),
    )
    state = classify(bare, arch="sm_80")
    assert (state.bottleneck, state.state, state.findings, state.headroom) == (
        "latency",
        "latency.issue",
        [],
        None,
    )
    assert "SpeedOfLight" in state.summary


def test_a_streaming_kernel_is_dram_bound_even_when_l2_is_slightly_busier():
    (case,) = [c for c in CASES if c.name == "h100-bias_gelu_scale"]
    scale = _kernel(case, "scale_inplace")
    assert scale.metrics[m.L2_PCT] > scale.metrics[m.DRAM_PCT] >= 0.9 * scale.metrics[m.L2_PCT]
    state = classify(scale, arch="sm_90")
    assert state.state == "memory.dram"
    assert state.summary.startswith(f"memory-bound (DRAM {scale.metrics[m.DRAM_PCT]:.0f}% of peak)")
    # the same L2 load with little DRAM traffic behind it is L2 reuse: L2 binds
    cached = msgspec.structs.replace(scale, metrics={**scale.metrics, m.DRAM_PCT: 20.0})
    assert classify(cached, arch="sm_90").state == "memory.l2"
