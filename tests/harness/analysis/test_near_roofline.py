"""Near-roofline kernels: no wrong advice. The real capture (tests/fixtures/ncu/h100-cublas) is
checked first; the synthetic profile below is cuBLAS's bf16 GEMM as issue 12 measured it on an
H100 (an `nvjet` wgmma kernel: SM 94%, L1 as busy, gmma stalls dominant, ncu's occupancy rule
promising 79.6% = 4.9x), built from the metric names real H100 reports carry
(tests/fixtures/ncu/h100-examples; test_the_metric_names_are_real checks them)."""

from __future__ import annotations

import msgspec
import ncu_report
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import KernelProfile, LaunchConfig, RuleResult
from tests.harness.profile_cases import ROOTS

HOPPER_TENSOR_PIPE, HOPPER_GMMA_ISSUE = m.TENSOR_PIPES[1:]
OCCUPANCY = {
    "occupancy_limited_registers",
    "occupancy_limited_shared_memory",
    "occupancy_limited_block_size",
    "low_achieved_occupancy",
}

NVJET_METRICS = {
    m.DURATION: 1_210_000.0,
    m.SM_PCT: 94.2,
    m.MEMORY_PCT: 95.6,
    m.L1_PCT: 95.6,  # wgmma reads its operands from shared memory
    m.L2_PCT: 47.9,
    m.DRAM_PCT: 30.8,
    m.GRID_SIZE: 132.0,
    m.BLOCK_SIZE: 384.0,
    m.SM_COUNT: 132.0,
    m.WAVES: 1.0,
    m.REGISTERS: 168.0,
    m.THEORETICAL_OCCUPANCY: 18.75,
    m.ACHIEVED_OCCUPANCY: 18.6,
    m.BLOCK_LIMITS["registers"]: 1.0,
    m.BLOCK_LIMITS["shared_memory"]: 1.0,
    m.BLOCK_LIMITS["warps"]: 5.0,
    m.BLOCK_LIMITS["blocks"]: 32.0,
    m.ISSUE_ACTIVE: 0.17,
    m.CYCLES_PER_ISSUE: 22.0,
    m.stall_metric("gmma"): 14.1,
    m.stall_metric("long_scoreboard"): 1.2,
    m.stall_metric("barrier"): 2.3,
    m.PIPES["fma"]: 3.1,
    m.PIPES["alu"]: 5.4,
    m.PIPES["fp64"]: 0.0,
    m.PIPES["tensor"]: 0.0,  # counts mma.sync only: wgmma shows in the Hopper metrics
    m.PIPES["lsu"]: 4.0,
    m.PIPES["xu"]: 0.6,
    HOPPER_TENSOR_PIPE: 93.6,
    HOPPER_GMMA_ISSUE: 93.1,
}
OCCUPANCY_RULE = RuleResult(
    id="TheoreticalOccupancy",
    section="Occupancy",
    type="optimization",
    title="Occupancy",
    message="The 3.00 theoretical warps per scheduler this kernel can issue to is limited by "
    "the required amount of shared memory.",
    estimated_speedup=79.6,
    speedup_kind="local",
)


def nvjet(**changes: float) -> KernelProfile:
    return KernelProfile(
        name="nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
        demangled="nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
        duration_ns=1_210_000.0,
        launch=LaunchConfig(grid=[132, 1, 1], block=[384, 1, 1], registers_per_thread=168),
        metrics={**NVJET_METRICS, **changes},
        rules=[OCCUPANCY_RULE],
    )


def test_the_captured_cublas_gemm_gets_no_advice_that_cannot_help():
    """On the H100 capture ncu fires its occupancy and 'Small Grid' (one block per SM) rules on
    a kernel at 97% of the tensor pipe; neither more warps nor more blocks can help there."""
    report = read_report(ROOTS["fixtures"] / "ncu" / "h100-cublas" / "cublas-gemm.ncu-rep")
    gemm = next(kernel for kernel in report.kernels if kernel.name.startswith("nvjet"))
    assert {rule.title for rule in gemm.rules} >= {"Small Grid"}
    state = classify(gemm, arch=report.arch, device=report.device)
    assert state.state == "compute.tensor" and state.near_limit, state.summary
    assert state.headroom is not None and state.headroom.achieved_fraction > 0.95
    assert state.findings == [], state.findings
    assert "at 97% of the tensor roof" in state.summary


def test_one_block_per_sm_is_worded_as_such_when_the_sm_has_room():
    """Below saturation, ncu's 'Small Grid' rule on a grid that fills the SMs is reported as
    the blocks per SM it is about, not as a grid smaller than the GPU."""
    rule = RuleResult(
        id="LaunchConfiguration",
        section="LaunchStats",
        type="optimization",
        title="Small Grid",
        message="it is recommended to have at least two blocks per multiprocessor",
    )
    kernel = msgspec.structs.replace(
        nvjet(**{HOPPER_TENSOR_PIPE: 40.0, HOPPER_GMMA_ISSUE: 40.0, m.SM_PCT: 45.0}),
        rules=[rule],
    )
    (finding,) = [f for f in classify(kernel, arch="sm_90").findings if f.id == "small_grid"]
    assert finding.message.startswith("1.0 blocks per SM (132 blocks, 132 SMs)")


def test_the_metric_names_are_real():
    report = ROOTS["fixtures"] / "ncu" / "h100-examples" / "matmul.ncu-rep"
    action = ncu_report.load_report(str(report)).range_by_idx(0).action_by_idx(0)
    assert set(NVJET_METRICS) <= set(action.metric_names())


def test_a_tensor_core_gemm_at_the_sm_roof_is_compute_bound_and_near_its_limit():
    state = classify(nvjet(), arch="sm_90", device="NVIDIA H100 80GB HBM3")
    assert (state.bottleneck, state.state) == ("compute", "compute.tensor"), state.summary
    assert state.near_limit
    assert state.headroom is not None and state.headroom.roof == "fp16_tensor"
    assert state.headroom.achieved_fraction == pytest.approx(0.936)
    assert state.summary.startswith("compute-bound (SM 94% of peak; tensor pipe 94%)")
    assert "at 94% of the tensor roof" in state.summary


def test_no_occupancy_advice_and_no_latency_symptoms_at_a_saturated_pipe():
    state = classify(nvjet(), arch="sm_90")
    found = {finding.id for finding in state.findings}
    assert not found & OCCUPANCY  # ncu's 4.9x doesn't apply: the tensor pipe is the limit
    assert "low_issue_utilization" not in found and "stall_gmma" not in found
    assert "occupancy" not in state.summary


def test_the_issue_slots_saturated_rule_out_occupancy_advice_too():
    issue_bound = nvjet(**{HOPPER_TENSOR_PIPE: 20.0, HOPPER_GMMA_ISSUE: 20.0, m.ISSUE_ACTIVE: 0.85})
    found = {finding.id for finding in classify(issue_bound, arch="sm_90").findings}
    assert not found & OCCUPANCY


def test_below_saturation_the_occupancy_estimate_is_capped_by_the_busiest_unit():
    # the same kernel with its tensor pipe at 40%: L1 at 95.6% is what binds
    half = nvjet(**{HOPPER_TENSOR_PIPE: 40.0, HOPPER_GMMA_ISSUE: 40.0, m.SM_PCT: 62.0})
    state = classify(half, arch="sm_90")
    assert state.state == "memory.l1" and not state.near_limit
    limited = next(f for f in state.findings if f.id == "occupancy_limited_shared_memory")
    assert limited.estimated_speedup == pytest.approx(100.0 - 95.6)  # not ncu's 79.6


def test_without_the_hopper_metrics_the_volta_tensor_pipe_still_counts():
    # an mma.sync (HMMA) kernel reports through the tensor pipe every GPU since Volta has
    metrics = {k: v for k, v in NVJET_METRICS.items() if k not in m.TENSOR_PIPES[1:]}
    hmma = msgspec.structs.replace(nvjet(), metrics={**metrics, m.PIPES["tensor"]: 91.0})
    state = classify(hmma, arch="sm_80")
    assert state.state == "compute.tensor" and state.near_limit


@pytest.mark.parametrize(("fraction", "near"), [(0.79, False), (0.80, True), (0.95, True)])
def test_near_limit_from_80_percent_of_any_roof(fraction, near):
    streaming = KernelProfile(
        name="copy",
        demangled="copy(float const*, float*)",
        launch=LaunchConfig(grid=[4096, 1, 1], block=[256, 1, 1], registers_per_thread=16),
        metrics={
            m.SM_PCT: 20.0,
            m.MEMORY_PCT: 100.0 * fraction,
            m.DRAM_PCT: 100.0 * fraction,
            m.DRAM_BYTES_PEAK_PER_CYCLE: 64.0,
            m.DRAM_CYCLES_PER_SECOND: 1.6e9,
            m.DRAM_BYTES_PER_SECOND: fraction * 64.0 * 1.6e9,
        },
    )
    state = classify(streaming, arch="sm_90")
    assert state.headroom is not None and state.headroom.roof == "dram_bandwidth"
    assert state.near_limit is near


def test_tensor_cores_busy_at_the_sm_roof_are_compute_bound_even_below_saturation():
    # if ncu measures the tensor pipe at 70% while the SM runs at 94%: still no memory.l1
    busy = nvjet(**{HOPPER_TENSOR_PIPE: 70.0, HOPPER_GMMA_ISSUE: 70.0})
    state = classify(busy, arch="sm_90")
    assert state.state == "compute.tensor" and state.near_limit
    assert state.headroom is not None
    assert state.headroom.roof == "sm_throughput"
    assert state.headroom.achieved_fraction == pytest.approx(0.942)
    assert "at 94% of the SM roof" in state.summary


def test_a_compute_bound_kernel_below_the_sm_roof_is_not_near_its_limit():
    fma = nvjet(
        **{HOPPER_TENSOR_PIPE: 0.0, HOPPER_GMMA_ISSUE: 0.0, m.PIPES["fma"]: 72.0},
        **{m.SM_PCT: 75.0, m.MEMORY_PCT: 40.0},
    )
    state = classify(fma, arch="sm_90")
    assert state.state == "compute.fp32" and not state.near_limit
    assert state.headroom is not None and state.headroom.roof == "fp32"
