"""The in-process profile's metric set and launch statistics (harness/analysis/counter_metrics.py),
against
the committed Nsight Compute reports: the launch statistics and theoretical occupancy computed
from each report's launch (with occupancy.py) are ncu's own, and a profile holding only what the
in-process path collects classifies every committed kernel as its full ncu report does."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.counter_metrics import (
    COUNTER_METRICS,
    LAUNCH_METRICS,
    is_hardware_metric,
    launch_metrics,
)
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import LaunchConfig, ProfileReport

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ncu"
REPORTS = sorted(FIXTURES.rglob("*.ncu-rep"))
# ncu's and ours must be equal; ncu's shared-memory limit is that of the driver's carveout
EXACT = [
    name
    for name in LAUNCH_METRICS
    if name not in (m.WAVES, m.THEORETICAL_OCCUPANCY, m.BLOCK_LIMITS["shared_memory"])
]
LIMITS = [m.BLOCK_LIMITS[name] for name in ("registers", "warps", "blocks")]


def _id(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def test_the_collected_metrics_are_the_classifiers_hardware_metrics():
    for name in (
        m.DURATION,
        m.SM_PCT,
        m.MEMORY_PCT,
        m.DRAM_PCT,
        m.L1_PCT,
        m.L2_PCT,
        m.ACHIEVED_OCCUPANCY,
        m.ISSUE_ACTIVE,
        m.CYCLES_PER_ISSUE,
        m.THREADS_PER_INSTRUCTION,
        m.stall_metric("long_scoreboard"),
        m.stall_metric("gmma"),
        *m.PIPES.values(),
        *m.TENSOR_PIPES,
        *m.BANK_CONFLICTS,
        *m.SHARED_WAVEFRONTS,
        m.L1_HIT_RATE,
        m.L2_HIT_RATE,
        m.DRAM_BYTES_PER_SECOND,
    ):
        assert name in COUNTER_METRICS
    # computed from the launch, derived by ncu, or counted by instrumenting SASS: not asked for
    for name in (
        m.GRID_SIZE,
        m.WAVES,
        m.BLOCK_LIMITS["registers"],
        m.THEORETICAL_OCCUPANCY,
        m.BYTES_PER_SECTOR_LOAD,
        m.SPILL_INSTRUCTIONS,
        m.GLOBAL_EXCESSIVE_SECTORS,
        m.FP32_OPS_PER_CYCLE[0],
    ):
        assert name not in COUNTER_METRICS
        assert not is_hardware_metric(name)
    assert len(COUNTER_METRICS) == len(set(COUNTER_METRICS))


def test_every_collected_metric_is_named_as_ncu_reports_it():
    # an H100 quick report holds a value for each, under the very same name
    kernel = read_report(FIXTURES / "h100-examples" / "relu.ncu-rep").kernels[0]
    assert [name for name in COUNTER_METRICS if name not in kernel.metrics] == []


@pytest.mark.parametrize("report_path", REPORTS, ids=_id)
def test_launch_statistics_and_occupancy_are_ncus(report_path):
    report = read_report(report_path)
    for kernel in report.kernels:
        ncu = kernel.metrics
        ours = launch_metrics(kernel.launch, arch=report.arch, sm_count=int(ncu[m.SM_COUNT]))
        assert set(ours) == set(LAUNCH_METRICS)
        assert {name: ours[name] for name in EXACT} == {name: ncu[name] for name in EXACT}
        assert ours[m.THEORETICAL_OCCUPANCY] == pytest.approx(ncu[m.THEORETICAL_OCCUPANCY])
        assert ours[m.WAVES] == pytest.approx(ncu[m.WAVES], rel=1e-12)
        # ncu's shared-memory limit is that of the carveout the driver picked: the largest
        # (ours) where shared memory alone limits the kernel, a smaller one where it need not
        shared = m.BLOCK_LIMITS["shared_memory"]
        others = [ncu[name] for name in LIMITS]
        assert ours[shared] >= ncu[shared]
        if ncu[shared] < min(others):
            assert ours[shared] == ncu[shared]


def test_without_shared_memory_the_limit_is_the_block_limit_as_ncu_says():
    report = read_report(FIXTURES / "h100-examples" / "relu.ncu-rep")
    (kernel,) = report.kernels
    ours = launch_metrics(kernel.launch, arch=report.arch, sm_count=132)
    shared = m.BLOCK_LIMITS["shared_memory"]
    assert ours[shared] == kernel.metrics[shared] == 32


def test_the_shared_memory_limit_binds_as_ncu_says_on_a_cublas_gemm():
    # cuBLAS's 184 KiB of dynamic shared memory: one block per SM, 18.75% occupancy
    report = read_report(FIXTURES / "h100-cublas" / "cublas-gemm.ncu-rep")
    gemm = next(k for k in report.kernels if k.name.startswith("nvjet"))
    ours = launch_metrics(gemm.launch, arch=report.arch, sm_count=132)
    assert ours[m.BLOCK_LIMITS["shared_memory"]] == 1.0
    assert ours[m.THEORETICAL_OCCUPANCY] == pytest.approx(18.75)


def test_a_block_too_large_to_launch_has_no_waves():
    launch = LaunchConfig(grid=[64, 1, 1], block=[2048, 1, 1], registers_per_thread=32)
    ours = launch_metrics(launch, arch="sm_90", sm_count=132)
    assert ours[m.THEORETICAL_OCCUPANCY] == 0.0
    assert ours[m.BLOCK_LIMITS["blocks"]] == 0.0
    assert m.WAVES not in ours


def _as_collected_in_process(report: ProfileReport) -> ProfileReport:
    """`report` as the in-process path would have made it: the counters it collects, the launch
    statistics it computes, and no ncu rules or source markers."""
    kernels = []
    for kernel in report.kernels:
        metrics = {name: value for name, value in kernel.metrics.items() if name in COUNTER_METRICS}
        sm_count = int(kernel.metrics[m.SM_COUNT])
        metrics |= launch_metrics(kernel.launch, arch=report.arch, sm_count=sm_count)
        kernels.append(msgspec.structs.replace(kernel, metrics=metrics, rules=[], markers=[]))
    return msgspec.structs.replace(report, kernels=kernels, program="in_process")


@pytest.mark.parametrize("report_path", REPORTS, ids=_id)
def test_the_in_process_metrics_reproduce_ncus_state_of_every_committed_kernel(report_path):
    report = read_report(report_path)
    ncu = [(state.kernel, state.bottleneck, state.state) for state in classify_report(report)]
    in_process = classify_report(_as_collected_in_process(report))
    assert [(state.kernel, state.bottleneck, state.state) for state in in_process] == ncu
