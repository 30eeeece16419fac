"""The roofline from real Nsight Compute reports: roofs measured by the report (peak per cycle
times the clocks the kernel ran at), the published peaks when the report has none, and each
kernel's point (FP32 + FP64 FLOP/s, an FMA counting two, against its DRAM traffic)."""

from __future__ import annotations

import msgspec
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis import roofline
from kernelblaster.harness.analysis.ncu_reader import read_report
from tests.conftest import FIXTURES

NCU_FIXTURES = FIXTURES / "ncu"


@pytest.fixture(scope="module")
def five():
    report = read_report(NCU_FIXTURES / "h100-five" / "five.ncu-rep", depth="full")
    return report, {k.name: k for k in report.kernels}


def test_h100_roofs_measured_from_the_report(five):
    report, kernels = five
    roofs = roofline.roofs(kernels["divergent"], report.device)
    assert roofs is not None and roofs.source == "measured"
    # 1280 B/cycle at 2.618 GHz DRAM; 33792 FLOP/cycle (132 SMs × 128 FP32 lanes × 2) at 1.976 GHz
    assert roofs.dram_bytes_per_s == pytest.approx(3.351e12, rel=1e-3)
    assert roofs.fp32_flops_per_s == pytest.approx(66.77e12, rel=1e-3)
    assert roofs.fp64_flops_per_s == pytest.approx(roofs.fp32_flops_per_s / 2, rel=1e-6)
    assert roofs.ridge_intensity == pytest.approx(19.9, rel=1e-2)
    assert "NVIDIA H100 80GB HBM3" in roofs.note and "1.98 GHz" in roofs.note


def test_points_of_real_kernels(five):
    _, kernels = five
    divergent = roofline.point(kernels["divergent"])
    assert divergent is not None
    # 5458 FFMA/cycle × 2 at 1.976 GHz, no FADD/FMUL; 1.188 TB/s of DRAM traffic
    assert divergent.flops_per_s == pytest.approx(21.57e12, rel=1e-3)
    assert divergent.dram_bytes_per_s == pytest.approx(1.188e12, rel=1e-3)
    assert divergent.intensity == pytest.approx(18.16, rel=1e-3)
    transpose = roofline.point(kernels["transpose_naive"])
    assert transpose is not None and transpose.flops_per_s == 0.0 and transpose.intensity == 0.0


def test_published_peaks_when_the_report_measured_none(five):
    _, kernels = five
    quick = msgspec.structs.replace(
        kernels["divergent"],
        metrics={
            k: v
            for k, v in kernels["divergent"].metrics.items()
            if k not in (m.DRAM_BYTES_PEAK_PER_CYCLE, m.FP32_PEAK_FLOPS_PER_CYCLE)
        },
    )
    h100 = roofline.roofs(quick, "NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.source == "published"
    assert (h100.dram_bytes_per_s, h100.fp32_flops_per_s) == (3.35e12, 66.9e12)
    pcie = roofline.roofs(quick, "NVIDIA H100 PCIe")
    assert pcie is not None and pcie.dram_bytes_per_s == 2.0e12  # not the SXM's
    assert roofline.roofs(quick, "NVIDIA GeForce GTX 1080") is None


def test_no_point_without_the_counts():
    report = read_report(NCU_FIXTURES / "h200-naive3" / "probe.ncu-rep", depth="full")
    kernel = report.kernels[0]
    stripped = msgspec.structs.replace(
        kernel, metrics={k: v for k, v in kernel.metrics.items() if k != m.SM_CYCLES_PER_SECOND}
    )
    assert roofline.point(stripped) is None
    assert roofline.point(kernel) is not None
