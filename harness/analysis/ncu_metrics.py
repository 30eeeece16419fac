"""The ncu metrics the classifier reads, kept per kernel in `KernelProfile.metrics`.

A report holds thousands of metrics per kernel; only these travel on (worker pipe, cache, KB),
so profiles stay small. Names are ncu's, unchanged, so evidence can be looked up in ncu's docs.
Missing ones (a quick-depth report, an older GPU) are simply absent.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Speed of light and time.
DURATION = "gpu__time_duration.sum"  # ns
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
L1_PCT = "l1tex__throughput.avg.pct_of_peak_sustained_active"
L2_PCT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"

# Launch configuration.
GRID_SIZE = "launch__grid_size"
BLOCK_SIZE = "launch__block_size"
SM_COUNT = "launch__sm_count"
WAVES = "launch__waves_per_multiprocessor"
REGISTERS = "launch__registers_per_thread"
SHARED_STATIC = "launch__shared_mem_per_block_static"
SHARED_DYNAMIC = "launch__shared_mem_per_block_dynamic"
GRID_DIMS = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
BLOCK_DIMS = ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")

# Occupancy: percentages of the SM's warp slots, and blocks per SM each resource allows.
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
BLOCK_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared_memory": "launch__occupancy_limit_shared_mem",
    "warps": "launch__occupancy_limit_warps",
    "blocks": "launch__occupancy_limit_blocks",
    "barriers": "launch__occupancy_limit_barriers",
}

# Scheduler and warp state.
ISSUE_ACTIVE = "smsp__issue_active.avg.per_cycle_active"  # instructions per cycle, 0..1
CYCLES_PER_ISSUE = "smsp__average_warp_latency_per_inst_issued.ratio"
THREADS_PER_INSTRUCTION = "smsp__thread_inst_executed_per_inst_executed.ratio"  # of 32
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
# The stall reasons ncu's WarpStateStats section reports (ncu 2025.3; `gmma` on sm_90 only).
STALL_REASONS = (
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "gmma",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "misc",
    "no_instruction",
    "not_selected",
    "selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
)


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


# Pipe utilization (percent of peak while the SM is active).
PIPES = {
    "fma": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "alu": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "fp64": "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active",
    "tensor": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "lsu": "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "xu": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
}

# Tensor-pipe utilization, percent: the pipe PIPES["tensor"] names counts mma.sync (HMMA/IMMA/
# DMMA) on every GPU; Hopper's warpgroup MMA (wgmma: HGMMA, QGMMA, IGMMA...) shows only in
# these sm_90 metrics. The tensor pipe's utilization is the largest of those present.
TENSOR_PIPES = (
    PIPES["tensor"],
    "sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active"
    ".avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
)

# Memory access quality.
BYTES_PER_SECTOR_LOAD = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"
BYTES_PER_SECTOR_STORE = "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio"
GLOBAL_EXCESSIVE_SECTORS = "derived__memory_l2_theoretical_sectors_global_excessive"
SHARED_EXCESSIVE_WAVEFRONTS = "derived__memory_l1_wavefronts_shared_excessive"
BANK_CONFLICTS = (
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
SHARED_WAVEFRONTS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
)
SPILL_INSTRUCTIONS = "sass__inst_executed_register_spilling"
SPILL_REQUESTS = "derived__local_spilling_requests"
L1_HIT_RATE = "l1tex__t_sector_hit_rate.pct"
L2_HIT_RATE = "lts__t_sector_hit_rate.pct"

# Roofline inputs: achieved work per cycle and the peak per cycle.
DRAM_BYTES_PER_SECOND = "dram__bytes.sum.per_second"
DRAM_BYTES_PEAK_PER_CYCLE = "dram__bytes.sum.peak_sustained"
DRAM_CYCLES_PER_SECOND = "dram__cycles_elapsed.avg.per_second"
SM_CYCLES_PER_SECOND = "sm__cycles_elapsed.avg.per_second"  # the SM clock while it ran
FP32_OPS_PER_CYCLE = (  # FADD, FMUL, FFMA thread instructions per cycle; an FFMA is two FLOPs
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
)
FP32_PEAK_FLOPS_PER_CYCLE = "derived__sm__sass_thread_inst_executed_op_ffma_pred_on_x2"
FP64_OPS_PER_CYCLE = (
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed",
)
FP64_PEAK_FLOPS_PER_CYCLE = "derived__sm__sass_thread_inst_executed_op_dfma_pred_on_x2"
# The hierarchical roofline's other memory levels, as ncu's SpeedOfLight_Hierarchical*RooflineChart
# sections define them (ncu 2025.3): L1 is the LSU's writeback of local, global and distributed
# shared memory (128 bytes per active cycle), L2 its bytes to the crossbar (32 per active cycle).
# Their peaks are per cycle of each unit's own clock.
L1_BYTES_PER_SECOND = "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second"
L1_BYTES_PEAK_PER_CYCLE = "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained"
L1_CYCLES_PER_SECOND = "l1tex__cycles_elapsed.avg.per_second"
L2_BYTES_PER_SECOND = "derived__lts__lts2xbar_bytes.sum.per_second"
L2_BYTES_PEAK_PER_CYCLE = "derived__lts__lts2xbar_bytes.sum.peak_sustained"
L2_CYCLES_PER_SECOND = "lts__cycles_elapsed.avg.per_second"
CACHE_ROOFLINE: frozenset[str] = frozenset(
    {
        L1_BYTES_PER_SECOND,
        L1_BYTES_PEAK_PER_CYCLE,
        L1_CYCLES_PER_SECOND,
        L2_BYTES_PER_SECOND,
        L2_BYTES_PEAK_PER_CYCLE,
        L2_CYCLES_PER_SECOND,
    }
)
TENSOR_PCT = (
    "sm__ops_path_tensor_src_fp16.sum.pct_of_peak_sustained_elapsed",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.pct_of_peak_sustained_elapsed",
)


class TensorPath(NamedTuple):
    """One input type of the tensor cores, as the full profile's tensor roofline section
    (SpeedOfLight_HierarchicalTensorRooflineChart) counts it: FLOPs per cycle (an MMA's
    multiply-add counts two) over the whole GPU."""

    name: str
    achieved: tuple[str, ...]  # summed
    # The dense peaks of the instruction paths that can run this type (Hopper's wgmma, the
    # mma.sync of every architecture since Volta); the highest present is the roof. Not the
    # type's own `.peak_sustained`: for fp16, bf16 and tf32 ncu gives the 2:4-sparse peak there,
    # twice what a dense GEMM can reach.
    dense_peaks: tuple[str, ...]


TENSOR_PATHS: tuple[TensorPath, ...] = (
    TensorPath(
        "FP16",
        ("sm__ops_path_tensor_src_fp16.sum.per_cycle_elapsed",),
        (
            "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained",
            "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained",
        ),
    ),
    TensorPath(
        "BF16",
        ("sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed",),
        (
            "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
            "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
        ),
    ),
    TensorPath(
        "TF32",
        ("sm__ops_path_tensor_src_tf32_dst_fp32.sum.per_cycle_elapsed",),
        (
            "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
            "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
        ),
    ),
    TensorPath(
        "FP8",
        (
            "sm__ops_path_tensor_src_fp8_sparsity_off.sum.per_cycle_elapsed",
            "sm__ops_path_tensor_src_fp8_sparsity_on.sum.per_cycle_elapsed",
        ),
        ("sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained",),
    ),
    TensorPath(
        "FP64",
        ("sm__ops_path_tensor_src_fp64.sum.per_cycle_elapsed",),
        ("sm__ops_path_tensor_src_fp64.sum.peak_sustained",),
    ),
)

TENSOR_ROOFLINE: frozenset[str] = frozenset(
    name for path in TENSOR_PATHS for name in (*path.achieved, *path.dense_peaks)
)

KEPT: frozenset[str] = frozenset(
    {
        DURATION,
        SM_PCT,
        MEMORY_PCT,
        DRAM_PCT,
        L1_PCT,
        L2_PCT,
        GRID_SIZE,
        BLOCK_SIZE,
        SM_COUNT,
        WAVES,
        REGISTERS,
        SHARED_STATIC,
        SHARED_DYNAMIC,
        *GRID_DIMS,
        *BLOCK_DIMS,
        THEORETICAL_OCCUPANCY,
        ACHIEVED_OCCUPANCY,
        *BLOCK_LIMITS.values(),
        ISSUE_ACTIVE,
        CYCLES_PER_ISSUE,
        THREADS_PER_INSTRUCTION,
        *PIPES.values(),
        *TENSOR_PIPES,
        BYTES_PER_SECTOR_LOAD,
        BYTES_PER_SECTOR_STORE,
        GLOBAL_EXCESSIVE_SECTORS,
        SHARED_EXCESSIVE_WAVEFRONTS,
        *BANK_CONFLICTS,
        *SHARED_WAVEFRONTS,
        SPILL_INSTRUCTIONS,
        SPILL_REQUESTS,
        L1_HIT_RATE,
        L2_HIT_RATE,
        DRAM_BYTES_PER_SECOND,
        DRAM_BYTES_PEAK_PER_CYCLE,
        DRAM_CYCLES_PER_SECOND,
        SM_CYCLES_PER_SECOND,
        *FP32_OPS_PER_CYCLE,
        FP32_PEAK_FLOPS_PER_CYCLE,
        *FP64_OPS_PER_CYCLE,
        FP64_PEAK_FLOPS_PER_CYCLE,
        *TENSOR_PCT,
        *TENSOR_ROOFLINE,
        *CACHE_ROOFLINE,
    }
)


def is_kept(name: str) -> bool:
    return name in KEPT or STALL.fullmatch(name) is not None
