"""bench/learning_eval.py on the fixture table (invented numbers,
tests/agents/replay/fixture_table.py) and variations of it: the oracle's reach is the loop's (no
step past the roof, only the ranking's candidates, no continuing from a slower candidate unless an
enabler made it); the ceilings' seeded KB credits chains as the loop does and records failures as
failures; the task-level statistics say what each kernel contributes."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from bench import learning_eval as evaluation
from kernelblaster.agents.loop.rollout import credited_speedup
from kernelblaster.agents.replay.table import NAIVE, transitions
from kernelblaster.harness.protocol.records import Finding


def _edited(table, library, task, variant, **fields):
    """`table` with one measurement's fields (or its state's) replaced, transitions rederived."""
    measurements = []
    for m in table.measurements:
        if (m.task, m.variant) == (task, variant):
            state_fields = {
                k: fields.pop(k) for k in ("near_limit", "state", "findings") if k in fields
            }
            state = msgspec.structs.replace(m.state, **state_fields) if state_fields else m.state
            m = msgspec.structs.replace(m, state=state, **fields)
        measurements.append(m)
    edited = msgspec.structs.replace(table, measurements=measurements)
    edited.transitions = transitions(library, edited)
    return edited


def test_the_oracle_reaches_chains_within_a_rollout(table):
    reach = evaluation.reachable("matmul", table, NAIVE, 3)
    assert reach["smem_tiled"] == 1 and reach["reg_tiled"] == 2 and reach["wmma_3xtf32"] == 3
    assert "wmma_3xtf32" not in evaluation.reachable("matmul", table, NAIVE, 2)
    assert evaluation.best_ms("matmul", table, NAIVE, 3) == pytest.approx(0.48)


def test_the_oracle_takes_no_step_past_the_roof(table, library):
    assert evaluation.reachable("softmax", table, NAIVE, 3)["block_row_shfl"] == 2
    at_roof = _edited(table, library, "softmax", "block_row", near_limit=True)
    reach = evaluation.reachable("softmax", at_roof, NAIVE, 3)
    assert reach["block_row"] == 1 and "block_row_shfl" not in reach


def test_the_oracle_takes_only_techniques_the_ranking_offers(table, library):
    """matmul's register tiling is offered on smem_tiled's memory.l1 state; on a barrier-bound
    state with a barrier stall it is not a candidate, and nothing past it is reachable."""
    assert "reg_tiled" in evaluation.reachable("matmul", table, NAIVE, 3)
    barrier = _edited(
        table, library, "matmul", "smem_tiled",
        state="latency.barrier", findings=[Finding(id="stall_barrier", estimated_speedup=40.0)],
    )  # fmt: skip
    start = barrier.measurement("matmul", "smem_tiled")
    assert "register_tiling" not in evaluation.offered_by_ranking(start)
    reach = evaluation.reachable("matmul", barrier, NAIVE, 4)
    assert "smem_tiled" in reach and "reg_tiled" not in reach and "wmma_3xtf32" not in reach


def test_the_oracle_continues_from_a_slower_candidate_only_after_an_enabler(table, library):
    """row_sum: coalescing's kernel made slower than the naive one is reached but not built on
    (coalescing is no enabler); matmul's tiling made slower still is (tiling is an enabler:
    the loop keeps it)."""
    slow = _edited(table, library, "row_sum", "warp_row", time_ms=0.5)
    reach = evaluation.reachable("row_sum", slow, NAIVE, 3)
    assert reach["warp_row"] == 1 and "warp_row_vec4" not in reach
    slow_tiles = _edited(table, library, "matmul", "smem_tiled", time_ms=5.0)
    assert evaluation.reachable("matmul", slow_tiles, NAIVE, 2)["reg_tiled"] == 2


def test_a_seeded_kb_credits_chains_and_records_failures(table, library, kb):
    matmul = [t for t in library if t.task == "matmul"]
    recorded = evaluation.seed_kb(kb, matmul, table, depth=4)
    feasible = [
        e for e in table.transitions if e.task == "matmul" and evaluation.feasible(e, table)
    ]
    assert recorded == len(feasible) > 0
    by_technique = {(a.technique, a.before_state): a for a in kb.attempts()}
    tiling = by_technique[("shared_memory_tiling", "memory.l1")]
    # 3.5 -> 2.1 ms on its own, -> 0.48 ms (3xTF32) within the rest of a rollout
    assert tiling.measured_speedup == pytest.approx(credited_speedup(3.5 / 2.1, 3.5 / 0.48))
    assert tiling.outcome == "success" and tiling.target_finding == "uncoalesced_global_access"
    # matmul's failures are not offered where they start: not seeded; softmax's wrong one is
    assert {a.outcome for a in kb.attempts()} == {"success", "regression"}
    evaluation.seed_kb(kb, [t for t in library if t.task == "softmax"], table, depth=4)
    wrong = [a for a in kb.attempts() if a.kernel == "softmax" and a.outcome == "wrong_result"]
    assert [a.technique for a in wrong] == ["algebraic_simplification"]
    assert wrong[0].measured_speedup is None


def test_the_task_bootstrap_interval_and_the_contributions():
    per_task = {
        "a": np.log(np.array([1.0, 2.0])),
        "b": np.log(np.array([1.0, 1.0])),
        "c": np.log(np.array([1.0, 1.0])),
    }
    curve = evaluation.task_bootstrap(per_task, draws=500, seed=0)
    assert curve["mean"] == [1.0, pytest.approx(2 ** (1 / 3), abs=1e-4)]
    assert curve["lo"][1] <= curve["mean"][1] <= curve["hi"][1]
    assert curve["lo"][1] == pytest.approx(1.0)  # a resample without "a" shows no gain at all
    summary = evaluation.at_budgets(curve, (1, 2, 4))
    assert set(summary) == {"1", "2"}  # no budget 4 in a 2-step curve
    shares = evaluation.contributions(per_task, (2,))["2"]
    assert shares["a"] == {"ratio": 2.0, "share": 1.0}
    assert shares["b"]["share"] == 0.0
    assert evaluation.median_error([0.1, 0.5, 0.2]) == 0.2 and evaluation.median_error([]) is None
    assert math.isclose(
        evaluation.per_task_log_ratio({"a": [[2.0], [4.0]]}, {"a": [[1.0], [1.0]]})["a"][0],
        math.log(8) / 2,
    )
