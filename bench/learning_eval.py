"""What bench/learning.py measures the arms against, and how it aggregates them honestly: each
task's loop-feasible reach (`reachable`: only the chains the ranking and the loop's stopping
rules allow), the memory ceilings of a KB seeded with table edges (`seed_kb`: the task's own, or
leave-one-out), and statistics over tasks, not only orderings (a task-level bootstrap)."""

from __future__ import annotations

import math
import time
import uuid
from functools import cache

import numpy as np

from kernelblaster.agents.loop.plan import MIN_SPEEDUP
from kernelblaster.agents.loop.rollout import credited_speedup
from kernelblaster.agents.replay.table import LearningTable, Measurement, Task, Transition
from kernelblaster.kb import ranking
from kernelblaster.kb.catalog import enablers, load_catalog
from kernelblaster.kb.records import Attempt, Technique, code_hash
from kernelblaster.kb.store import KnowledgeBase

NOISE_SIGMAS = 3.0  # a candidate within this many spreads of MIN_SPEEDUP may be kept
SEEDED_OUTCOMES = {  # a transition's outcome -> the KB's, for seeding
    "success": "success",
    "regression": "regression",
    "build_error": "compile_error",
    "wrong": "wrong_result",
    "crash": "crash",
    "timeout": "timeout",
}


@cache
def _catalog() -> dict[str, Technique]:
    return {t.id: t for t in load_catalog().technique}


def offered_by_ranking(measured: Measurement) -> set[str]:
    """The techniques the ranking offers for a verified kernel's state and findings: those of
    an empty KB (learning changes their order, not the set, for techniques chosen by rank)."""
    assert measured.state is not None
    state = measured.state
    ranked = ranking.rank_all(
        _catalog(), state.arch, state.state, state.findings, {}, ranking.Learned({}, {}), {}
    )
    return {r.technique for r in ranked}


def feasible(edge: Transition, table: LearningTable) -> bool:
    """Whether the loop can take `edge`: its start is verified, not at the roof, and the
    ranking offers its technique there."""
    start = table.measurement(edge.task, edge.source)
    if start is None or start.state is None or start.state.near_limit:
        return False
    return edge.technique in offered_by_ranking(start)


def keepable(edge: Transition, table: LearningTable) -> bool:
    """Whether the loop can continue from the edge's target: verified and faster than its start
    by MIN_SPEEDUP within NOISE_SIGMAS of the two spreads, or made by an enabler."""
    if edge.speedup is None:
        return False
    if edge.technique in enablers():
        return True
    start = table.measurement(edge.task, edge.source)
    spread = math.hypot(edge.spread or 0.0, (start.spread if start else 0.0) or 0.0)
    return edge.speedup * math.exp(NOISE_SIGMAS * spread) >= MIN_SPEEDUP


def reachable(task: str, table: LearningTable, start: str, steps: int) -> dict[str, int]:
    """Every variant the loop can reach from `start` within `steps` steps of one rollout, with
    the fewest steps it takes (`start`: 0)."""
    edges = [
        e for e in table.transitions if e.task == task and e.speedup is not None
    ]  # fmt: skip
    usable = [e for e in edges if feasible(e, table)]
    reached = {start: 0}
    frontier = {start}
    for step in range(1, steps + 1):
        expandable = set()
        for edge in usable:
            if edge.source not in frontier:
                continue
            reached.setdefault(edge.target, step)
            if keepable(edge, table):
                expandable.add(edge.target)
        frontier = expandable
    return reached


def best_ms(task: str, table: LearningTable, start: str, steps: int) -> float:
    """The fastest verified kernel reachable from `start` within `steps` (`start` included)."""
    times = []
    for variant in reachable(task, table, start, steps):
        measured = table.measurement(task, variant)
        assert measured is not None and measured.time_ms is not None
        times.append(measured.time_ms)
    return min(times)


# --- memory ceilings: a KB seeded with table edges -------------------------------------------


def seed_kb(kb: KnowledgeBase, tasks: list[Task], table: LearningTable, depth: int) -> int:
    """Record every loop-feasible edge of `tasks` as an attempt, credited with what it enables
    within the rest of a rollout (as the loop credits a kept step); returns how many."""
    recorded = 0
    for task in tasks:
        for edge in table.transitions:
            if edge.task != task.task or not feasible(edge, table):
                continue
            start = table.measurement(edge.task, edge.source)
            assert start is not None and start.state is not None and start.time_ms is not None
            technique = _catalog()[edge.technique]
            target = ranking.target_finding(technique, ranking.finding_gains(start.state.findings))
            speedup = None
            outcome = SEEDED_OUTCOMES[edge.outcome]
            if edge.speedup is not None:
                chained = start.time_ms / best_ms(edge.task, table, edge.target, depth - 1)
                speedup = (
                    credited_speedup(edge.speedup, chained)
                    if keepable(edge, table)
                    else (edge.speedup)
                )
                outcome = "success" if speedup >= MIN_SPEEDUP else "regression"
            kb.record(
                Attempt(
                    id=uuid.uuid4().hex,
                    time=time.time(),
                    arch=start.state.arch,
                    kernel=task.task,
                    source_hash=code_hash(task.source_text(edge.source)),
                    candidate_hash=code_hash(task.source_text(edge.target)),
                    before_state=start.state.state,
                    after_state=edge.state_after,
                    technique=edge.technique,
                    predicted_speedup=1.0,
                    measured_speedup=speedup,
                    outcome=outcome,  # type: ignore[arg-type]
                    correctness_detail="seeded from the measured table",
                    target_finding=target,
                )
            )
            recorded += 1
    return recorded


# --- statistics over tasks --------------------------------------------------------------------


def per_task_log_ratio(
    numerator: dict[str, list[list[float]]], denominator: dict[str, list[list[float]]]
) -> dict[str, np.ndarray]:
    """Per task: the mean over its held-out runs of log(numerator's best / denominator's) at
    each budget; the runs of the two arms are paired (same ordering, same seeds)."""
    result = {}
    for task, curves in numerator.items():
        ratios = np.log(np.array(curves)) - np.log(np.array(denominator[task]))
        result[task] = ratios.mean(axis=0)
    return result


def task_bootstrap(per_task: dict[str, np.ndarray], draws: int, seed: int) -> dict:
    """The geometric mean ratio over tasks per budget, with a 95% interval from resampling the
    tasks (with replacement): how much the result depends on which kernels are in the suite."""
    data = np.array(list(per_task.values()))  # tasks x budgets
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.shape[0], size=(draws, data.shape[0]))
    means = data[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return {
        "mean": np.exp(data.mean(axis=0)).round(4).tolist(),
        "lo": np.exp(low).round(4).tolist(),
        "hi": np.exp(high).round(4).tolist(),
    }


def at_budgets(curve: dict, budgets: tuple[int, ...]) -> dict[str, dict[str, float]]:
    """{"1": {"mean", "lo", "hi"}, ...} from per-budget lists (budget b at index b - 1)."""
    return {
        str(b): {key: curve[key][b - 1] for key in ("mean", "lo", "hi")}
        for b in budgets
        if b <= len(curve["mean"])
    }


def contributions(per_task: dict[str, np.ndarray], budgets: tuple[int, ...]) -> dict:
    """Per task and budget: its mean log ratio and its share of the suite's total (a share
    near 1 for one task says the result is that task's)."""
    result = {}
    for b in budgets:
        values = {task: float(v[b - 1]) for task, v in per_task.items() if b <= len(v)}
        total = sum(values.values())
        result[str(b)] = {
            task: {
                "ratio": round(math.exp(value), 4),
                "share": round(value / total, 4) if abs(total) > 1e-12 else None,
            }
            for task, value in sorted(values.items(), key=lambda item: -item[1])
        }
    return result


def median_error(errors: list[float]) -> float | None:
    """The median |log(predicted / measured)| of the chosen techniques' predictions."""
    return round(float(np.median(errors)), 4) if errors else None
