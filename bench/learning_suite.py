"""Can the learning suite show what memory is worth, before a GPU measures anything new?

    python -m bench.learning_suite --table bench/results/learning-table-nvidia-h100-80gb-hbm3.json
    python -m bench.learning_suite --table T.json --what-if --shrink 0.5 --out /tmp/suite.json

Per task: what the fresh arm tries and holds after 1, 2 and 4 steps, the oracle's chain, `room` =
oracle / fresh, and which other tasks share the keys memory could transfer through; then
bench/learning.py's ceilings and gate. `--what-if` fills unmeasured kernels from their manifest's
predictions (`--shrink s` tempers them): an estimate of whether a GPU run is worth it, not a
result."""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import msgspec

from bench import learning
from bench import learning_eval as evaluation
from kernelblaster.agents.replay.mode import ReplayStep
from kernelblaster.agents.replay.table import (
    NAIVE,
    LearningTable,
    LibraryError,
    Measurement,
    Task,
    load_library,
    read_table,
    transitions,
)
from kernelblaster.kb import ranking
from kernelblaster.kb.store import KnowledgeBase

BUDGETS = (1, 2, 4)
SAME = 1.02  # a room below this is none (MIN_SPEEDUP: within the timing spread)


# --- the what-if table ---------------------------------------------------------------------


def what_if_table(
    tasks: list[Task], table: LearningTable, shrink: float = 1.0
) -> tuple[LearningTable, dict[str, str]]:
    """`table` with every kernel it does not measure currently filled in from its manifest
    (see the module's doc), and the tasks that could not be filled in, with why."""
    measurements = [m for m in table.measurements]
    unpredictable: dict[str, str] = {}
    for task in tasks:
        filled, why = _predicted_task(task, table, shrink)
        if why:
            unpredictable[task.task] = why
            continue
        done = {(m.task, m.variant) for m in filled}
        measurements = [m for m in measurements if (m.task, m.variant) not in done] + filled
    predicted = LearningTable(
        device=table.device,
        arch=table.arch,
        min_speedup=table.min_speedup,
        note=f"what-if: {table.device}'s measurements, the rest predicted (shrink {shrink})",
        measurements=measurements,
    )
    predicted.transitions = transitions(
        [t for t in tasks if t.task not in unpredictable], predicted
    )
    return predicted, unpredictable


def _predicted_task(
    task: Task, table: LearningTable, shrink: float
) -> tuple[list[Measurement], str]:
    """The predicted measurements of `task`'s kernels that `table` does not measure currently,
    or why they can't be predicted."""
    filled: list[Measurement] = []
    naive = table.current(task, NAIVE)
    naive_ms = naive.time_ms if naive is not None else None
    for name in [NAIVE, *(v.name for v in task.variant)]:
        if table.current(task, name) is not None:
            continue
        expect = "success" if name == NAIVE else _variant(task, name).expect
        if expect in ("build_error", "wrong"):
            filled.append(
                Measurement(
                    task=task.task, variant=name, source_sha256="", outcome=expect,
                    detail=f"predicted: {expect}",
                )
            )  # fmt: skip
            continue
        predicted = task.prediction(name)
        if predicted is None:
            return [], f"{name} is expected to verify but has no prediction"
        like = table.measurement(*predicted.like.split("/"))
        if like is None or like.outcome != "verified" or like.time_ms is None:
            return [], f"{name}'s prediction names {predicted.like}: not a verified measurement"
        like_naive = table.measurement(like.task, NAIVE)
        assert like_naive is not None and like_naive.time_ms is not None
        speedup = predicted.speedup or like_naive.time_ms / like.time_ms
        if name == NAIVE:
            naive_ms = like.time_ms / speedup
            time_ms = naive_ms
        else:
            if naive_ms is None:
                return [], "its naive kernel is neither measured nor predicted"
            time_ms = naive_ms / speedup**shrink
        scale = time_ms / like.time_ms
        filled.append(
            Measurement(
                task=task.task,
                variant=name,
                source_sha256="",
                outcome="verified",
                detail=f"predicted like {predicted.like}",
                time_ms=time_ms,
                repetitions=like.repetitions,
                spread=like.spread,
                state=like.state,
                kernel_ns={k: ns * scale for k, ns in like.kernel_ns.items()},
            )
        )
    return filled, ""


def _variant(task: Task, name: str):
    return next(v for v in task.variant if v.name == name)


# --- per task: the fresh arm against the oracle ---------------------------------------------


def ranked_at(task: Task, table: LearningTable, variant: str) -> list[dict]:
    """The prior's ranking (an empty KB) of the techniques the library offers at `variant`,
    with where each edge leads and how it measured."""
    start = table.measurement(task.task, variant)
    assert start is not None and start.state is not None
    state = start.state
    edges = {(e.source, e.technique): e for e in table.transitions if e.task == task.task}
    gains = ranking.finding_gains(state.findings)
    rows = []
    for item in ranking.rank_all(
        evaluation._catalog(), state.arch, state.state, state.findings, {},
        ranking.Learned({}, {}), {},
    ):  # fmt: skip
        edge = edges.get((variant, item.technique))
        if edge is None:
            continue
        rows.append(
            {
                "technique": item.technique,
                "predicted": round(item.predicted_speedup, 3),
                "target_finding": ranking.target_finding(
                    evaluation._catalog()[item.technique], gains
                ),
                "to": edge.target,
                "outcome": edge.outcome,
                "speedup": None if edge.speedup is None else round(edge.speedup, 3),
            }
        )
    return rows


def best_chain(task: str, table: LearningTable, steps: int) -> list[tuple[str, str, str]]:
    """The loop-feasible chain (from, technique, to) from the naive kernel to the fastest
    kernel reachable within `steps` (empty: nothing beats the naive kernel)."""
    usable = [
        e for e in table.transitions
        if e.task == task and e.speedup is not None and evaluation.feasible(e, table)
    ]  # fmt: skip
    paths: dict[str, list[tuple[str, str, str]]] = {NAIVE: []}
    frontier = {NAIVE}
    for _ in range(steps):
        expandable = set()
        for edge in usable:
            if edge.source in frontier and edge.target not in paths:
                paths[edge.target] = [
                    *paths[edge.source],
                    (edge.source, edge.technique, edge.target),
                ]
                if evaluation.keepable(edge, table):
                    expandable.add(edge.target)
        frontier = expandable

    def time_of(variant: str) -> float:
        measured = table.measurement(task, variant)
        assert measured is not None and measured.time_ms is not None
        return measured.time_ms

    return paths[min(paths, key=time_of)]


def key_elsewhere(
    task: Task, tasks: list[Task], table: LearningTable, variant: str, technique: str
) -> dict:
    """The (technique, target finding) key of applying `technique` at `variant`, and how the
    feasible edges of other tasks with the same key measured (what leave-one-out memory knows)."""
    start = table.measurement(task.task, variant)
    assert start is not None and start.state is not None
    key_target = _target(start, technique)
    others = []
    for edge in table.transitions:
        if edge.task == task.task or edge.technique != technique:
            continue
        if not any(t.task == edge.task for t in tasks) or not evaluation.feasible(edge, table):
            continue
        source = table.measurement(edge.task, edge.source)
        assert source is not None
        if _target(source, technique) != key_target:
            continue
        same_state = source.state is not None and source.state.state == start.state.state
        result = edge.outcome if edge.speedup is None else f"{edge.speedup:.2f}x"
        others.append(
            f"{edge.task}/{edge.source}{'' if same_state else ' (other state)'}: {result}"
        )
    return {"technique": technique, "target_finding": key_target, "elsewhere": others}


def _target(measured: Measurement, technique: str) -> str:
    assert measured.state is not None
    gains = ranking.finding_gains(measured.state.findings)
    return ranking.target_finding(evaluation._catalog()[technique], gains)


def analyse(
    task: Task, tasks: list[Task], table: LearningTable, config: learning.Config, scratch: Path
) -> dict:
    naive = table.measurement(task.task, NAIVE)
    assert naive is not None and naive.state is not None and naive.time_ms is not None
    trace: list[ReplayStep] = []
    with KnowledgeBase.open(scratch / f"fresh-{task.task}.sqlite3") as kb:
        fresh = learning.run_task(
            task, table, kb, config, seed=config.seed, selection=config.held_out_selection,
            held_out=True, trace=trace,
        )  # fmt: skip
    oracle = learning.oracle_best(task, table, config)
    chain = best_chain(task.task, table, min(2, config.depth))
    steps = []
    for step in trace[:4]:
        measured = table.measurement(task.task, step.target) if step.target else None
        speedup = (
            None
            if measured is None or measured.time_ms is None
            else round(naive.time_ms / measured.time_ms, 3)
        )
        outcome = measured.outcome if measured else "no rewrite"
        steps.append({"from": step.source, "technique": step.technique, "to": step.target,
                      "outcome": outcome, "speedup_vs_naive": speedup})  # fmt: skip
    keys = {}
    if trace:
        keys["fresh_first"] = key_elsewhere(task, tasks, table, NAIVE, trace[0].technique)
    if chain:
        keys["oracle_first"] = key_elsewhere(task, tasks, table, chain[0][0], chain[0][1])
    record = {
        "task": task.task,
        "family": task.family,
        "naive_state": naive.state.state,
        "naive_at_roof": naive.state.near_limit,
        "prior_at_naive": ranked_at(task, table, NAIVE) if not naive.state.near_limit else [],
        "fresh_steps": steps,
        "fresh": {str(b): round(fresh.best[b - 1], 3) for b in BUDGETS},
        "oracle": {str(b): round(oracle[b - 1], 3) for b in BUDGETS},
        "oracle_chain_2": [f"{a} --{t}--> {b}" for a, t, b in chain],
        "keys": keys,
    }
    record["room"] = {
        str(b): round(record["oracle"][str(b)] / record["fresh"][str(b)], 3) for b in BUDGETS
    }
    record["why"] = diagnosis(record)
    return record


def diagnosis(record: dict) -> str:
    """Why a task has (or has no) room at budget 2, in words."""
    if record["naive_at_roof"]:
        return "naive kernel classified at its roof: the loop takes no step"
    steps = record["fresh_steps"]
    if record["room"]["2"] < SAME:
        first = steps[0] if steps else None
        if first and first["outcome"] == "verified" and record["room"]["1"] < SAME:
            return "prior right: its first choice is the oracle's"
        return "prior's first choice fails, its second is the oracle's: room at budget 1 only"
    if not steps:
        return "room, but the fresh arm takes no step"
    first = steps[0]
    if first["outcome"] != "verified":
        return (f"prior's first choice fails ({first['technique']}: {first['outcome']}) and "
                "the oracle's chain needs both steps")  # fmt: skip
    return (f"prior's first choice ({first['technique']}) verifies but leads off the oracle's "
            "chain (a dead end or a lesser branch)")  # fmt: skip


# --- the report --------------------------------------------------------------------------------


def run(table: LearningTable, library: list[Task], config: learning.Config, *, what_if: bool,
        shrink: float) -> dict:  # fmt: skip
    left_out: dict[str, str] = {}
    if what_if:
        table, left_out = what_if_table(library, table, shrink)
        tasks = [t for t in library if t.task not in left_out]
    else:
        tasks = [t for t in library if all(table.current(t, v) for v in _kernels(t))]
        left_out = {t.task: "not fully measured" for t in library if t not in tasks}
    if len(tasks) < 2:
        raise SystemExit(f"{len(tasks)} task(s) to analyse; need 2 or more")
    with tempfile.TemporaryDirectory(dir=learning.fast_scratch()) as name:
        scratch = Path(name)
        records = [analyse(t, tasks, table, config, scratch) for t in tasks]
        ceiling = learning.ceilings(tasks, table, config, scratch)
    loo = ceiling["leave_one_out"]
    for record in records:
        for name in ("same_kernel", "leave_one_out"):
            record[name] = ceiling[f"{name}_per_task"][record["task"]]
    room = {
        str(b): round(math.exp(sum(math.log(r["room"][str(b)]) for r in records) / len(records)), 4)
        for b in BUDGETS
    }  # fmt: skip
    return {
        "table": {"device": table.device, "note": table.note},
        "what_if": what_if,
        "shrink": shrink,
        "tasks": [t.task for t in tasks],
        "left_out": left_out,
        "room_geomean": room,
        "ceiling_same_kernel": ceiling["same_kernel"],
        "ceiling_leave_one_out": loo,
        "gate": {
            "leave_one_out_at_2": loo.get("2"),
            "threshold": learning.CEILING_GATE,
            "passes": (loo.get("2") or 0.0) >= learning.CEILING_GATE,
        },
        "per_task": records,
    }


def _kernels(task: Task) -> list[str]:
    return [NAIVE, *(v.name for v in task.variant)]


def markdown(result: dict) -> str:
    """The per-task table and the summary, as the analysis report quotes them."""
    lines = [
        "| task | family | naive state | fresh steps 1-2 | fresh @1/@2/@4 | oracle @1/@2/@4 "
        "| room @2 | same-kernel @2 | leave-one-out @2 | why |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["per_task"]:
        steps = "; ".join(
            f"{s['technique']}→{s['to'] or '-'} ({s['outcome']}"
            + (f" {s['speedup_vs_naive']:.2f}x)" if s["speedup_vs_naive"] else ")")
            for s in r["fresh_steps"][:2]
        )
        f, o = r["fresh"], r["oracle"]
        lines.append(
            f"| {r['task']} | {r['family']} | {r['naive_state']}"
            f"{' (roof)' if r['naive_at_roof'] else ''} | {steps} "
            f"| {f['1']:.2f}/{f['2']:.2f}/{f['4']:.2f} | {o['1']:.2f}/{o['2']:.2f}/{o['4']:.2f} "
            f"| {r['room']['2']:.2f} | {r['same_kernel']['2']:.2f} "
            f"| {r['leave_one_out']['2']:.2f} | {r['why']} |"
        )
    gate = result["gate"]
    lines += [
        "",
        f"room (geomean oracle / fresh): {result['room_geomean']}",
        f"ceiling same kernel: {result['ceiling_same_kernel']}",
        f"ceiling leave-one-out: {result['ceiling_leave_one_out']}",
        f"gate: leave-one-out at 2 = {gate['leave_one_out_at_2']} vs {gate['threshold']}: "
        + ("passes" if gate["passes"] else "fails"),
    ]
    if result["left_out"]:
        lines.append(f"left out: {result['left_out']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, required=True, help="a measured learning table")
    parser.add_argument(
        "--what-if", action="store_true", help="predict what the table does not measure"
    )
    parser.add_argument(
        "--shrink", type=float, default=1.0, help="predicted speedups to this power (what-if)"
    )
    parser.add_argument("--ceiling-seeds", type=int, default=learning.DEFAULTS.ceiling_seeds)
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    config = learning.Config(tables=[str(args.table)], ceiling_seeds=args.ceiling_seeds)
    try:
        result = run(
            read_table(args.table), load_library(learning.LIBRARY), config,
            what_if=args.what_if, shrink=args.shrink,
        )  # fmt: skip
    except LibraryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=1) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
