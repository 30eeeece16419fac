"""A kernel on the roofline, as ncu's SpeedOfLight charts draw it: achieved FLOP/s against FLOPs per
DRAM byte, under the DRAM, FP32, FP64 and used tensor-core roofs (a tensor-core GEMM counts its
MMA FLOPs), and, as ncu's hierarchical charts, the L1 and L2 roofs with FLOPs per L1 and L2 byte
(where an uncoalesced kernel's traffic is). Roofs come from the report where it measured them,
else the GPU's published peaks, and the answer says which. Pure: no ncu, no GPU."""

from __future__ import annotations

from typing import Literal

import msgspec

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.protocol.records import KernelProfile


class TensorRoof(msgspec.Struct, kw_only=True, frozen=True):
    path: str  # the input type, as ncu_metrics.TENSOR_PATHS names it: "FP16", "BF16", ...
    flops_per_s: float  # dense peak (no 2:4 sparsity)


class Roofs(msgspec.Struct, kw_only=True, frozen=True):
    dram_bytes_per_s: float
    # the L1 (global/local) and L2 bandwidth roofs: measured only (no published figures)
    l1_bytes_per_s: float | None = None
    l2_bytes_per_s: float | None = None
    fp32_flops_per_s: float
    fp64_flops_per_s: float | None = None
    # The tensor-core roofs of the input types the kernel's MMAs used (none for a kernel
    # without any, and none for published roofs: the report then has no tensor counts)
    tensor: list[TensorRoof] = []
    # "measured": from the report's peak-per-cycle metrics and clocks; "published": the GPU's
    # data-sheet numbers at its boost clock (the report had no peaks, e.g. counters collected
    # in-process or a quick-depth report)
    source: Literal["measured", "published"]
    note: str  # where the numbers come from, in words

    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte where the FP32 roof meets the memory roof."""
        return self.fp32_flops_per_s / self.dram_bytes_per_s


class RooflinePoint(msgspec.Struct, kw_only=True, frozen=True):
    # FLOP/s achieved: FP32 + FP64 on the CUDA cores (an FMA counts two) and on the tensor
    # cores (an MMA's multiply-add counts two)
    flops_per_s: float
    dram_bytes_per_s: float
    tensor_flops_per_s: float = 0.0  # the tensor cores' share of flops_per_s
    # the L1 and L2 traffic of the hierarchical roofline; None without its sections' counts
    l1_bytes_per_s: float | None = None
    l2_bytes_per_s: float | None = None

    @property
    def intensity(self) -> float | None:
        """FLOPs per DRAM byte; None when the kernel moved no DRAM bytes."""
        return self.flops_per_s / self.dram_bytes_per_s if self.dram_bytes_per_s > 0 else None


class PublishedPeaks(msgspec.Struct, kw_only=True, frozen=True):
    name: str  # what `device` must contain
    dram_bytes_per_s: float
    fp32_flops_per_s: float
    fp64_flops_per_s: float


# Data-sheet peaks (non-tensor FP32/FP64 at boost clock, DRAM bandwidth), most specific first:
# an "H100 PCIe" must not match the SXM entry.
PUBLISHED: tuple[PublishedPeaks, ...] = (
    PublishedPeaks(name="H100 PCIe", dram_bytes_per_s=2.0e12, fp32_flops_per_s=51.2e12,
                   fp64_flops_per_s=25.6e12),
    PublishedPeaks(name="H100 NVL", dram_bytes_per_s=3.9e12, fp32_flops_per_s=60.0e12,
                   fp64_flops_per_s=30.0e12),
    PublishedPeaks(name="H100", dram_bytes_per_s=3.35e12, fp32_flops_per_s=66.9e12,
                   fp64_flops_per_s=33.5e12),
    PublishedPeaks(name="H200", dram_bytes_per_s=4.8e12, fp32_flops_per_s=66.9e12,
                   fp64_flops_per_s=33.5e12),
    PublishedPeaks(name="A100-SXM4-80GB", dram_bytes_per_s=2.039e12, fp32_flops_per_s=19.5e12,
                   fp64_flops_per_s=9.7e12),
    PublishedPeaks(name="A100", dram_bytes_per_s=1.555e12, fp32_flops_per_s=19.5e12,
                   fp64_flops_per_s=9.7e12),
    PublishedPeaks(name="L40S", dram_bytes_per_s=0.864e12, fp32_flops_per_s=91.6e12,
                   fp64_flops_per_s=1.43e12),
)  # fmt: skip


def point(kernel: KernelProfile) -> RooflinePoint | None:
    """Where `kernel` sits, or None when the profile lacks the metrics (a quick pass)."""
    metrics = kernel.metrics
    clock = metrics.get(m.SM_CYCLES_PER_SECOND)
    dram = metrics.get(m.DRAM_BYTES_PER_SECOND)
    fp32 = _flops_per_cycle(metrics, m.FP32_OPS_PER_CYCLE)
    if clock is None or dram is None or fp32 is None:
        return None
    fp64 = _flops_per_cycle(metrics, m.FP64_OPS_PER_CYCLE) or 0.0
    tensor = sum(_tensor_flops_per_cycle(metrics).values())
    return RooflinePoint(
        flops_per_s=(fp32 + fp64 + tensor) * clock,
        dram_bytes_per_s=dram,
        tensor_flops_per_s=tensor * clock,
        l1_bytes_per_s=metrics.get(m.L1_BYTES_PER_SECOND),
        l2_bytes_per_s=metrics.get(m.L2_BYTES_PER_SECOND),
    )


def roofs(kernel: KernelProfile, device: str) -> Roofs | None:
    """The GPU's roofs as the report measured them, else its published peaks, else None."""
    metrics = kernel.metrics
    clock = metrics.get(m.SM_CYCLES_PER_SECOND)
    dram_peak = metrics.get(m.DRAM_BYTES_PEAK_PER_CYCLE)
    dram_clock = metrics.get(m.DRAM_CYCLES_PER_SECOND)
    fp32_peak = metrics.get(m.FP32_PEAK_FLOPS_PER_CYCLE)
    if clock and dram_peak and dram_clock and fp32_peak:
        fp64_peak = metrics.get(m.FP64_PEAK_FLOPS_PER_CYCLE)
        return Roofs(
            dram_bytes_per_s=dram_peak * dram_clock,
            l1_bytes_per_s=_peak(metrics, m.L1_BYTES_PEAK_PER_CYCLE, m.L1_CYCLES_PER_SECOND),
            l2_bytes_per_s=_peak(metrics, m.L2_BYTES_PEAK_PER_CYCLE, m.L2_CYCLES_PER_SECOND),
            fp32_flops_per_s=fp32_peak * clock,
            fp64_flops_per_s=fp64_peak * clock if fp64_peak else None,
            tensor=_tensor_roofs(metrics, clock),
            source="measured",
            note=f"measured by Nsight Compute on the {device} at the clocks the kernel ran at "
            f"(SM {clock / 1e9:.2f} GHz{_l2_clock(metrics)}, DRAM {dram_clock / 1e9:.2f} GHz)",
        )
    published = next((p for p in PUBLISHED if p.name.lower() in device.lower()), None)
    if published is None:
        return None
    return Roofs(
        dram_bytes_per_s=published.dram_bytes_per_s,
        fp32_flops_per_s=published.fp32_flops_per_s,
        fp64_flops_per_s=published.fp64_flops_per_s,
        source="published",
        note=f"published peaks of the {published.name} at its boost clock: the profile did not "
        "measure them, nor the L1 and L2 roofs (profile at full depth for the measured roofs)",
    )


def _l2_clock(metrics: dict[str, float]) -> str:
    """The L2's clock as ', L2 1.71 GHz' when the report has it (L1's is the SM's)."""
    clock = metrics.get(m.L2_CYCLES_PER_SECOND)
    return f", L2 {clock / 1e9:.2f} GHz" if clock else ""


def _peak(metrics: dict[str, float], per_cycle: str, cycles_per_second: str) -> float | None:
    """A unit's peak per second: its peak per cycle at the clock it ran at; None when either is
    missing."""
    peak, clock = metrics.get(per_cycle), metrics.get(cycles_per_second)
    return peak * clock if peak and clock else None


def _flops_per_cycle(metrics: dict[str, float], ops: tuple[str, str, str]) -> float | None:
    """add + mul + 2 × fma thread instructions per cycle; None when any is missing."""
    values = [metrics.get(name) for name in ops]
    if any(value is None for value in values):
        return None
    add, mul, fma = values
    assert add is not None and mul is not None and fma is not None
    return add + mul + 2.0 * fma


def _tensor_flops_per_cycle(metrics: dict[str, float]) -> dict[str, float]:
    """FLOPs per cycle of each tensor-core input type the kernel used (none without the
    tensor roofline's counts: a quick or in-process profile)."""
    used = {}
    for path in m.TENSOR_PATHS:
        flops = sum(metrics.get(name) or 0.0 for name in path.achieved)
        if flops > 0:
            used[path.name] = flops
    return used


def _tensor_roofs(metrics: dict[str, float], clock: float) -> list[TensorRoof]:
    """The dense roof of each input type the kernel's MMAs used, highest first."""
    used = _tensor_flops_per_cycle(metrics)
    roofs = []
    for path in m.TENSOR_PATHS:
        peaks = [peak for name in path.dense_peaks if (peak := metrics.get(name))]
        if path.name in used and peaks:
            roofs.append(TensorRoof(path=path.name, flops_per_s=max(peaks) * clock))
    return sorted(roofs, key=lambda roof: -roof.flops_per_s)
