"""A TEST FIXTURE, not a measurement: a small learning table built by hand over five tasks of
the real library (bench/learning/tasks), so the replay and the experiment can be tested on a
CPU before the GPU table exists. The times are invented to be plausible for an H100 (naive
kernels of a few ms, tuned ones near bandwidth); states and findings are typical of what the
classifier reports for such kernels. The real table is bench/results/learning-table-<gpu>.json,
written by bench/learning_measure.py."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.agents.replay.table import (
    LearningTable,
    Measurement,
    load_library,
    source_digest,
    transitions,
)
from kernelblaster.harness.protocol.records import Finding, PerfState

REPO = Path(__file__).resolve().parents[3]
LIBRARY = REPO / "bench" / "learning" / "tasks"
TASKS = ("gelu", "layernorm", "matmul", "row_sum", "softmax")
SPREAD = 0.02  # 2% run-to-run, in log space

ROW_PER_THREAD = (  # a thread per row: the naive softmax / layernorm / row_sum
    "launch.small_grid",
    [("uncoalesced_global_access", 87.0), ("small_grid", 76.0), ("stall_long_scoreboard", 78.0)],
)
STREAMING = ("memory.dram", [("low_issue_utilization", 12.0)])
STREAMING_AT_ROOF = ("memory.dram", [])

# task -> variant -> (time in ms, or the failure; (state, findings); near the roof)
HAND_MADE: dict[str, dict[str, tuple]] = {
    "softmax": {
        "naive": (2.9, ROW_PER_THREAD, False),
        "block_row": (0.125, ("latency.barrier", [("stall_barrier", 35.0)]), False),
        "block_row_shfl": (0.105, STREAMING, False),
        "online": (0.095, STREAMING, False),
        "online_vec4": (0.09, STREAMING_AT_ROOF, True),
        "online_shfl_wrong": ("wrong", None, False),
        "host_helper": ("build_error", None, False),
    },
    "layernorm": {
        "naive": (3.1, ROW_PER_THREAD, False),
        "block_row": (0.135, ("latency.barrier", [("stall_barrier", 38.0)]), False),
        "block_row_shfl": (0.115, STREAMING, False),
        "one_pass": (0.1, STREAMING, False),
        "one_pass_vec4": (0.094, STREAMING_AT_ROOF, True),
        "welford_shfl_wrong": ("wrong", None, False),
        "vec4": ("build_error", None, False),
    },
    "row_sum": {
        "naive": (0.28, ROW_PER_THREAD, False),
        "warp_row": (0.092, STREAMING, False),
        "warp_row_vec4": (0.087, STREAMING_AT_ROOF, True),
        "block_row_smem": (0.1, ("latency.barrier", [("stall_barrier", 30.0)]), False),
        "block_row_shfl": (0.093, STREAMING, False),
        "block512_wrong": ("wrong", None, False),
        "shfl": ("build_error", None, False),
    },
    "gelu": {
        "naive": (0.09, STREAMING, False),
        "vec4": (0.086, STREAMING_AT_ROOF, True),
        "coarse4": (0.091, STREAMING, False),
        "tanh_fast": ("wrong", None, False),
        "vec4_gridstride": (0.087, STREAMING_AT_ROOF, True),
        "vec4_ldg": ("build_error", None, False),
        "coarse4_vec4_notail": ("wrong", None, False),
    },
    "matmul": {
        "naive": (
            3.5,
            ("memory.l1", [("uncoalesced_global_access", 39.0), ("tail_effect", 25.0)]),
            False,
        ),
        "block32x8": (3.45, ("memory.l1", [("uncoalesced_global_access", 36.0)]), False),
        # memory.l1, as the H100 table measured it: register tiling addresses it
        "smem_tiled": (2.1, ("memory.l1", [("low_issue_utilization", 11.0)]), False),
        "reg_tiled": (0.9, ("compute.fp32", [("stall_math_pipe_throttle", 20.0)]), False),
        "wmma_tf32": ("wrong", None, False),
        "wmma_3xtf32": (0.48, ("compute.tensor", []), False),
        "wmma_float": ("build_error", None, False),
    },
}


def perf_state(task: str, state_and_findings: tuple, near_limit: bool) -> PerfState:
    state, findings = state_and_findings
    return PerfState(
        kernel=task,
        arch="sm_90",
        bottleneck=state.split(".")[0],
        state=state,
        summary=f"{state} (test fixture)",
        findings=[Finding(id=fid, estimated_speedup=pct) for fid, pct in findings],
        near_limit=near_limit,
    )


def fixture_table() -> LearningTable:
    tasks = [t for t in load_library(LIBRARY) if t.task in TASKS]
    table = LearningTable(
        device="NVIDIA H100 80GB HBM3 (test fixture)",
        arch="sm_90",
        min_speedup=1.02,
        note="test fixture: hand-made numbers, not measurements",
    )
    for task in tasks:
        for variant, (result, state, near_limit) in HAND_MADE[task.task].items():
            text = task.source_text(variant)
            entry = Measurement(
                task=task.task,
                variant=variant,
                source_sha256=source_digest(text),
                outcome="verified",
            )
            if isinstance(result, str):
                entry.outcome = result
                entry.detail = f"{result} (test fixture)"
            else:
                entry.time_ms, entry.spread, entry.repetitions = result, SPREAD, 100
                entry.state = perf_state(task.task, state, near_limit)
            table.measurements.append(entry)
    table.transitions = transitions(tasks, table)
    return table
