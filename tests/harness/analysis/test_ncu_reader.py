"""Reading real .ncu-rep files: names, launch, metrics, rules without markup, source markers."""

from __future__ import annotations

import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.ncu_markup import strip_markup
from kernelblaster.harness.analysis.ncu_reader import ReportError, read_report, remap_sources
from tests.harness.profile_cases import CASES, load

FIVE = next(case for case in CASES if case.name == "h100-five")
NAIVE3 = next(case for case in CASES if case.name == "h200-naive3")


def _kernel(case, name):
    return next(kernel for kernel in load(case.report).kernels if kernel.name == name)


def test_report_header_and_launch_configuration():
    report = load(FIVE.report)
    assert (report.device, report.arch, report.depth) == ("NVIDIA H100 80GB HBM3", "sm_90", "full")
    assert report.report_path == str(FIVE.report)
    transpose = _kernel(FIVE, "transpose_naive")
    assert transpose.demangled == "transpose_naive(const float *, float *, int)"
    assert transpose.duration_ns == 288032.0
    assert (transpose.launch.grid, transpose.launch.block) == ([128, 128, 1], [32, 32, 1])
    assert transpose.launch.registers_per_thread == 16
    smem = _kernel(FIVE, "smem_column_sum")
    assert smem.launch.shared_static_bytes == 4096
    assert smem.launch.waves_per_sm == pytest.approx(0.4848, abs=1e-4)
    assert load(NAIVE3.report).device == "NVIDIA H200"


def test_only_the_classifier_metrics_travel():
    kernel = _kernel(FIVE, "register_hog")
    assert all(m.is_kept(name) for name in kernel.metrics)
    assert 40 < len(kernel.metrics) < 150  # of the report's ~2200 per kernel
    assert kernel.metrics[m.REGISTERS] == 56.0
    assert kernel.metrics[m.stall_metric("long_scoreboard")] > 0


def test_rule_results_keep_ids_types_and_estimates_with_markup_stripped():
    for case in CASES:
        for kernel in load(case.report).kernels:
            for rule in kernel.rules:
                assert "@section:" not in rule.message and "@url:" not in rule.message
                assert rule.message
    rules = _kernel(FIVE, "transpose_naive").rules
    bottleneck = next(r for r in rules if r.id == "SOLBottleneck")
    assert (bottleneck.section, bottleneck.type, bottleneck.title) == (
        "SpeedOfLight",
        "info",
        "High Throughput",
    )
    assert "analyzing L2 in the Memory Workload Analysis section" in bottleneck.message
    uncoalesced = next(r for r in rules if r.id == "UncoalescedGlobalAccess")
    assert uncoalesced.type == "optimization"
    assert (round(uncoalesced.estimated_speedup, 1), uncoalesced.speedup_kind) == (77.2, "global")
    issue = next(r for r in rules if r.id == "IssueSlotUtilization")
    assert issue.speedup_kind == "local"
    occupancy = next(r for r in rules if r.id == "AchievedOccupancy")
    assert "CUDA Best Practices Guide (https://docs.nvidia.com/cuda/" in occupancy.message


def test_sass_markers_are_pinned_to_source_lines():
    markers = _kernel(FIVE, "transpose_naive").markers
    located = {(mk.file, mk.line, mk.rule) for mk in markers}
    assert ("/src/five.cu", 13, "UncoalescedGlobalAccess") in located
    drain = [mk for mk in markers if mk.line == 14 and mk.rule == "CPIStall"]
    assert len(drain) == 1 and "of type drain" in drain[0].message  # the SASS-level message
    assert all(mk.kind == "optimization" for mk in markers)
    # WMMA's loads are inlined from CUDA's header; the SASS line table still finds the call site
    wmma = _kernel(FIVE, "wmma_gemm").markers
    assert ("/src/five.cu", 65) in {(mk.file, mk.line) for mk in wmma}
    assert any(mk.file.endswith("crt/mma.hpp") for mk in wmma)


def test_a_report_without_lineinfo_has_no_markers():
    assert all(not kernel.markers for kernel in load(NAIVE3.report).kernels)


def test_source_map_renames_recorded_paths(tmp_path):
    mine = str(tmp_path / "five.cu")
    report = read_report(FIVE.report, depth="quick", source_map={"/src/five.cu": mine})
    assert report.depth == "quick"
    files = {mk.file for kernel in report.kernels for mk in kernel.markers}
    assert mine in files and "/src/five.cu" not in files
    assert any(file.endswith("mma.hpp") for file in files)  # unmapped paths stay as recorded
    again = remap_sources(load(FIVE.report), {"/src/five.cu": mine})
    assert again.kernels == report.kernels


def test_unreadable_reports_raise_report_error(tmp_path):
    with pytest.raises(ReportError, match="no such report"):
        read_report(tmp_path / "missing.ncu-rep")
    junk = tmp_path / "junk.ncu-rep"
    junk.write_text("not a report")
    with pytest.raises(ReportError, match="holds no profiled kernels"):
        read_report(junk)
    truncated = tmp_path / "truncated.ncu-rep"
    truncated.write_bytes(FIVE.report.read_bytes()[:300_000])
    with pytest.raises(ReportError):
        read_report(truncated)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (
            "Start by analyzing L2 in the @section:MemoryWorkloadAnalysis:Memory Workload "
            "Analysis@ section.",
            "Start by analyzing L2 in the Memory Workload Analysis section.",
        ),
        (
            "See the @url:Profiling Guide:https://docs.nvidia.com/nsight-compute/"
            "ProfilingGuide/index.html#roofline@ for more.",
            "See the Profiling Guide (https://docs.nvidia.com/nsight-compute/ProfilingGuide/"
            "index.html#roofline) for more.",
        ),
        ("Check @section:A:One@ and @section:B:Two@.", "Check One and Two."),
        (
            "no markup, an e-mail user@example.com stays",
            "no markup, an e-mail user@example.com stays",
        ),
    ],
)
def test_strip_markup(raw, clean):
    assert strip_markup(raw) == clean
