"""The roofline from real Nsight Compute reports: roofs measured by the report (peak per cycle
times the clocks the kernel ran at), the published peaks when the report has none, each
kernel's point (FP32 + FP64 + tensor-core FLOP/s, an FMA counting two, against its DRAM
traffic), and the dense tensor-core roof of each input type a kernel's MMAs used."""

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
    assert divergent.tensor_flops_per_s == 0.0
    assert roofline.roofs(kernels["divergent"], "H100").tensor == []  # no MMA, no tensor roof


def test_a_cublas_gemm_sits_under_its_tensor_roof_not_near_zero():
    """cuBLAS's bf16 wgmma GEMM (tensor pipe 97% in ncu): 504878 bf16 FLOP/cycle × 1.598 GHz
    = 807 TFLOP/s, 93% of the dense bf16 roof (wgmma: 540672 FLOP/cycle = 4096 per SM), not of
    the 2:4-sparse peak ncu gives for the type itself (1081344). Without the tensor FLOPs its
    point was ~0 FLOP/s under a 66.8 TFLOP/s FP32 roof."""
    report = read_report(NCU_FIXTURES / "h100-cublas" / "cublas-gemm.ncu-rep", depth="full")
    (gemm,) = [k for k in report.kernels if k.name.startswith("nvjet_sm90")]
    where = roofline.point(gemm)
    roofs = roofline.roofs(gemm, report.device)
    assert where is not None and roofs is not None
    assert where.tensor_flops_per_s == pytest.approx(806.95e12, rel=1e-3)
    assert where.flops_per_s == pytest.approx(where.tensor_flops_per_s, rel=1e-3)  # all MMA
    assert [(r.path, r.flops_per_s) for r in roofs.tensor] == [
        ("BF16", pytest.approx(864.16e12, rel=1e-5))
    ]
    assert where.flops_per_s / roofs.tensor[0].flops_per_s == pytest.approx(0.934, abs=1e-3)
    assert where.flops_per_s > 10 * roofs.fp32_flops_per_s  # above the CUDA cores' roof


def test_a_wmma_gemm_counts_its_mma_flops_under_the_fp16_roof(five):
    """five.cu's wmma_gemm: 2 × 2048³ FLOPs of fp16 mma.sync; its roof is the best dense fp16
    path of the H100 (wgmma, 540672 FLOP/cycle), which mma.sync cannot reach (360448)."""
    _, kernels = five
    gemm = kernels["wmma_gemm"]
    where = roofline.point(gemm)
    roofs = roofline.roofs(gemm, "NVIDIA H100 80GB HBM3")
    assert where is not None and roofs is not None
    clock = gemm.metrics[m.SM_CYCLES_PER_SECOND]
    assert where.tensor_flops_per_s == pytest.approx(15217.91 * clock, rel=1e-6)
    assert 2 * 2048**3 / where.tensor_flops_per_s == pytest.approx(
        gemm.duration_ns * 1e-9, rel=0.01
    )  # the FLOPs of the problem over ncu's duration
    assert [(r.path, r.flops_per_s / clock) for r in roofs.tensor] == [("FP16", 540672.0)]


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


def test_the_hierarchical_roofs_are_measured_per_memory_level(five):
    """ncu's hierarchical charts: each level's peak bytes per cycle at that unit's own clock.
    H100 SXM: L1 16896 B/cycle (132 SMs × 128) at 1.979 GHz, L2 5120 B/cycle at 1.708 GHz."""
    report, kernels = five
    roofs = roofline.roofs(kernels["transpose_naive"], report.device)
    assert roofs is not None and roofs.source == "measured"
    assert roofs.l1_bytes_per_s == pytest.approx(33.44e12, rel=1e-3)
    assert roofs.l2_bytes_per_s == pytest.approx(8.743e12, rel=1e-3)
    assert roofs.dram_bytes_per_s == pytest.approx(3.352e12, rel=1e-3)
    assert roofs.l1_bytes_per_s > roofs.l2_bytes_per_s > roofs.dram_bytes_per_s
    assert "(SM 1.98 GHz, L2 1.71 GHz, DRAM 2.62 GHz)" in roofs.note


def test_an_uncoalesced_kernel_moves_its_traffic_through_l1_and_l2():
    """The H200's softmax_rowthread (a row per thread: 4 of 32 bytes per sector used) moves
    2.45 TB/s through L1, 4.5× its DRAM traffic; matmul_naive's reuse stays in L1 (16.9 TB/s,
    two thirds of the L1 roof) while DRAM sees 11 GB/s: where ncu says "memory 98% from L1"."""
    report = read_report(NCU_FIXTURES / "h200-naive3" / "probe.ncu-rep", depth="full")
    kernels = {k.name: k for k in report.kernels}
    softmax = roofline.point(kernels["softmax_rowthread"])
    assert softmax is not None
    assert softmax.l1_bytes_per_s == pytest.approx(2.4527e12, rel=1e-3)
    assert softmax.l2_bytes_per_s == pytest.approx(423.3e9, rel=1e-3)
    assert softmax.dram_bytes_per_s == pytest.approx(541.7e9, rel=1e-3)
    matmul = roofline.point(kernels["matmul_naive"])
    roofs = roofline.roofs(kernels["matmul_naive"], report.device)
    assert matmul is not None and roofs is not None
    assert roofs.l1_bytes_per_s is not None and matmul.l1_bytes_per_s is not None
    assert matmul.l1_bytes_per_s / roofs.l1_bytes_per_s == pytest.approx(0.665, abs=1e-3)
    assert matmul.dram_bytes_per_s == pytest.approx(11.21e9, rel=1e-3)


def test_published_roofs_and_in_process_points_have_no_cache_levels(five):
    _, kernels = five
    without = {m.DRAM_BYTES_PEAK_PER_CYCLE, m.FP32_PEAK_FLOPS_PER_CYCLE, *m.CACHE_ROOFLINE}
    quick = msgspec.structs.replace(
        kernels["divergent"],
        metrics={k: v for k, v in kernels["divergent"].metrics.items() if k not in without},
    )
    roofs = roofline.roofs(quick, "NVIDIA H100 80GB HBM3")
    assert roofs is not None and roofs.source == "published"
    assert roofs.l1_bytes_per_s is None and roofs.l2_bytes_per_s is None
    assert "nor the L1 and L2 roofs" in roofs.note
    where = roofline.point(quick)
    assert where is not None and where.l1_bytes_per_s is None and where.l2_bytes_per_s is None
