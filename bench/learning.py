"""Does the knowledge base learn? Learning curves of the real optimization loop replayed on a
measured table (agents/replay.py): the loop, KB, ranking, selection and write-back are the
real ones; the lowering agent returns the library's variant for the chosen technique, and the
harness's verdicts and times come from the table, with noise at the measured spread.

Protocol: for each of N orderings (seeded permutations of the tasks), the first part of the
tasks is for training and the rest is held out. Arms:
- persistent: one KB across the ordering's tasks (train, then held-out), with the selection
  given (the loop's defaults unless told: --temperature, --exploration, --avoid-failed);
- greedy: the same with temperature 0 (always the best-ranked technique; the default);
- fresh: a new, empty KB for every task (no memory);
- uniform: uniform random among every technique the ranking offers for the state;
- oracle: the best kernel any policy can reach within the budget (the table's best chain of
  verified rewrites, no longer than a rollout): an upper bound;
- transfer: a KB trained on another GPU's table, then tested on this one (with two tables).
Each task gets `rollouts x depth` steps; the curve at budget b is the best verified kernel after
the first b steps. Reported, with bootstrap confidence intervals over orderings: the held-out
geomean of the best speedup vs budget, the regret vs the oracle, wasted steps (steps that did
not give a faster verified kernel) and the prediction error |log(predicted / realized)| of
rank() by the task's position in the ordering; and comparisons paired by ordering (e.g.
persistent / fresh: both arms replay the same tasks with the same seeds). bench/learning_tune.py
tunes the selection with this experiment's arms, on training tasks only.

    python bench/learning.py                       # every bench/results/learning-table-*.json
    python bench/learning.py --table T.json --orderings 40 --temperature 0.5 --top-k 4

Writes bench/results/learning-<gpu>.json and a plot beside it (learning-<gpu>.png).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, for common
from common import REPO, RESULTS, repo_relative, slug

from kernelblaster.agents.loop import OptimizeRun, run_optimization
from kernelblaster.agents.replay import ReplayModel, ReplayTask
from kernelblaster.agents.replay_table import (
    NAIVE,
    LearningTable,
    LibraryError,
    Task,
    load_library,
    read_table,
)
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.kb import ranking
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

BENCH = Path(__file__).resolve().parent
LIBRARY = BENCH / "learning" / "tasks"
LEARNING_ARMS = ("persistent", "greedy", "fresh")  # arms whose predictions come from a KB
SETTINGS = Settings()
LOOP = OptimizeRequest(source="", source_text="", kernel="")  # the loop's defaults


class Config(msgspec.Struct, kw_only=True):
    tables: list[str]
    orderings: int = 20
    train_fraction: float = 0.6
    rollouts: int = 3
    depth: int = 4
    top_k: int = LOOP.top_k
    temperature: float = LOOP.temperature
    exploration: float = LOOP.exploration  # the selection's UCB bonus (kb.ranking.select)
    avoid_failed: bool = LOOP.avoid_failed  # skip what already failed on a step's kernel
    prior_strength: float = ranking.PRIOR_STRENGTH
    bootstrap: int = 2000
    seed: int = 0

    @property
    def budget(self) -> int:
        return self.rollouts * self.depth


class TaskRun(msgspec.Struct, kw_only=True):
    """One task optimized by one arm: per step, the best speedup so far and wasted steps."""

    task: str
    held_out: bool
    best: list[float]  # true (median) speedup of the best verified kernel after step 1..budget
    wasted: list[int]  # steps so far that gave no faster verified kernel
    errors: list[float]  # per step: |log(predicted speedup) - log(realized)|


# --- running the loop in replay ----------------------------------------------------------------


def run_task(
    task: Task,
    table: LearningTable,
    kb: KnowledgeBase,
    config: Config,
    *,
    seed: int,
    temperature: float,
    k: int,
    held_out: bool,
) -> TaskRun:
    replay = ReplayTask(task, table, rng=random.Random(seed))
    request = OptimizeRequest(
        source=str(replay.source),
        source_text=replay.naive_text,
        kernel=task.task,
        rollouts=config.rollouts,
        depth=config.depth,
        top_k=k,
        seed=seed,
        temperature=temperature,
        exploration=config.exploration,
        avoid_failed=config.avoid_failed,
        settings=SETTINGS,
    )
    outcome = run_optimization(
        OptimizeRun(
            request=request,
            client=ReplayModel(),  # type: ignore[arg-type]  # answers only what the replay needs
            kb=kb,
            evaluate=replay.evaluate,
            lower=replay.lower,
            offered=replay.offered,
        )
    )
    if outcome.error is not None:
        raise RuntimeError(f"replay of {task.task} failed: {outcome.error}")
    assert len(outcome.steps) == len(replay.steps), "one lowering call per loop step"
    naive_ms = replay.measured(NAIVE).time_ms
    best, best_measured = 1.0, math.inf  # the loop keeps the fastest *measured* candidate
    run = TaskRun(task=task.task, held_out=held_out, best=[], wasted=[], errors=[])
    wasted = 0
    for step, scripted in zip(outcome.steps, replay.steps, strict=True):
        if step.outcome == "success" and scripted.target is not None:
            assert scripted.time_ms is not None
            if scripted.time_ms < best_measured:
                best_measured = scripted.time_ms
                best = naive_ms / replay.measured(scripted.target).time_ms
        else:
            wasted += 1
        realized = step.measured_speedup or 1.0  # a failed attempt leaves the kernel as it was
        run.errors.append(abs(math.log(step.predicted_speedup) - math.log(realized)))
        run.best.append(best)
        run.wasted.append(wasted)
    while len(run.best) < config.budget:  # every rollout stopped early (at the roof)
        run.best.append(best)
        run.wasted.append(wasted)
    return run


def fully_measured(task: Task, table: LearningTable) -> bool:
    variants = [NAIVE, *(v.name for v in task.variant)]
    return all(table.measurement(task.task, v) is not None for v in variants)


def ordering_of(tasks: list[Task], config: Config, index: int) -> tuple[list[Task], list[Task]]:
    shuffled = list(tasks)
    random.Random(config.seed * 100_003 + index).shuffle(shuffled)
    n_train = max(1, min(len(tasks) - 1, round(config.train_fraction * len(tasks))))
    return shuffled[:n_train], shuffled[n_train:]


def run_arm(
    arm: str,
    train: list[Task],
    test: list[Task],
    table: LearningTable,
    config: Config,
    scratch: Path,
    index: int,
    *,
    train_table: LearningTable | None = None,
    label: str | None = None,
) -> list[TaskRun]:
    """One arm over one ordering: training tasks (for the arms that learn), then held-out,
    with the training tasks replayed from `train_table` when given. Its KBs are files
    `<label>-<ordering>-<position>` in `scratch`."""
    ranking.PRIOR_STRENGTH = config.prior_strength  # the arm's, whatever the shipped value
    k, temperature = config.top_k, config.temperature
    if arm == "greedy":
        temperature = 0.0
    elif arm == "uniform":
        k, temperature = 1000, math.inf  # every ranked technique, equally likely
    sequence = [(t, False) for t in train if arm != "uniform"] + [(t, True) for t in test]
    memoryless = arm in ("fresh", "uniform")
    runs = []
    kb = None
    try:
        for position, (task, held_out) in enumerate(sequence):
            if kb is None or memoryless:
                if kb is not None:
                    kb.close()
                kb = KnowledgeBase.open(scratch / f"{label or arm}-{index}-{position}.sqlite3")
            source = train_table if (train_table is not None and not held_out) else table
            seed = config.seed * 1_000_003 + index * 1000 + position
            runs.append(
                run_task(
                    task, source, kb, config, seed=seed, temperature=temperature, k=k,
                    held_out=held_out,
                )
            )  # fmt: skip
    finally:
        if kb is not None:
            kb.close()
    return runs


def oracle_best(task: Task, table: LearningTable, config: Config) -> list[float]:
    """The best true speedup reachable within each budget: chains of verified rewrites no
    longer than a rollout (and than the budget), whatever their speedups along the way."""
    naive_ms = table.measurement(task.task, NAIVE).time_ms
    edges = [t for t in table.transitions if t.task == task.task and t.speedup is not None]
    reached = {NAIVE: 0}  # variant -> fewest steps to reach it
    frontier = {NAIVE}
    for steps in range(1, config.depth + 1):
        frontier = {e.target for e in edges if e.source in frontier} - set(reached)
        reached.update(dict.fromkeys(frontier, steps))
    curve = []
    for budget in range(1, config.budget + 1):
        times = [
            table.measurement(task.task, variant).time_ms
            for variant, steps in reached.items()
            if steps <= min(budget, config.depth)
        ]
        curve.append(max(1.0, naive_ms / min(times)))
    return curve


# --- statistics ---------------------------------------------------------------------------------


def bootstrap(values: np.ndarray, config: Config, *, log: bool) -> dict:
    """Mean over orderings (axis 0; geometric when `log`) with a 95% bootstrap interval; NaN
    (no value in that ordering) is left out."""
    data = np.log(values) if log else values
    rng = np.random.default_rng(config.seed)
    picks = rng.integers(0, data.shape[0], size=(config.bootstrap, data.shape[0]))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a sample of only NaN: its mean is NaN
        means = np.nanmean(data[picks], axis=1)
        low, high = np.nanpercentile(means, [2.5, 97.5], axis=0)
        mean = np.nanmean(data, axis=0)
    if log:
        mean, low, high = np.exp(mean), np.exp(low), np.exp(high)
    return {"mean": mean.round(4).tolist(), "ci95": [low.round(4).tolist(), high.round(4).tolist()]}


def summarize(
    runs: dict[str, list[list[TaskRun]]], oracle: list[dict[str, list[float]]], config: Config
) -> dict:
    """Per arm: held-out geomean best speedup, regret vs the oracle and wasted steps, each per
    budget; for the arms that learn, the prediction error by position in the ordering."""
    summary = {}
    oracle_rows = []
    any_arm = next(iter(runs.values()))  # every arm holds out the same tasks
    for index, per_task in enumerate(oracle):
        held_out = [r.task for r in any_arm[index] if r.held_out]
        oracle_rows.append(_geomean([per_task[name] for name in held_out]))
    oracle_curves = np.array(oracle_rows)
    summary["oracle"] = {
        "best_speedup": bootstrap(oracle_curves, config, log=True),
        "per_ordering": oracle_curves.round(4).tolist(),
    }
    for arm, per_ordering in runs.items():
        best = held_out_best(per_ordering)
        wasted = np.array(
            [np.mean([r.wasted for r in rs if r.held_out], axis=0) for rs in per_ordering]
        )
        entry = {
            "best_speedup": bootstrap(best, config, log=True),
            "regret": bootstrap(oracle_curves / best, config, log=True),
            "wasted_steps": bootstrap(wasted, config, log=False),
            "per_ordering": best.round(4).tolist(),
        }
        if arm.split(" (")[0] in LEARNING_ARMS:  # e.g. "persistent (tuned)" in learning_tune
            # A task the loop took no step on (its kernel already at a roof) has no error.
            errors = np.array([[_mean_or_nan(r.errors) for r in rs] for rs in per_ordering])
            entry["prediction_error_by_position"] = bootstrap(errors, config, log=False)
        summary[arm] = entry
    return summary


def held_out_best(per_ordering: list[list[TaskRun]]) -> np.ndarray:
    """Per ordering (rows) and budget (columns): the held-out tasks' geomean best speedup."""
    return np.array([_geomean([r.best for r in rs if r.held_out]) for rs in per_ordering])


def paired_ratio(
    runs: dict[str, list[list[TaskRun]]], numerator: str, denominator: str, config: Config
) -> dict:
    """`numerator`'s held-out geomean best speedup over `denominator`'s, ordering by ordering
    (both arms replay the same tasks with the same seeds), so the interval is that of the
    difference itself rather than two overlapping intervals; and per budget the share of
    orderings where the numerator is ahead, level and behind."""
    ratio = held_out_best(runs[numerator]) / held_out_best(runs[denominator])
    result = bootstrap(ratio, config, log=True)
    for name, holds in (("ahead", ratio > 1 + 1e-9), ("behind", ratio < 1 - 1e-9)):
        result[f"orderings_{name}"] = holds.mean(axis=0).round(4).tolist()
    return result


def _mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _geomean(curves: list[list[float]]) -> list[float]:
    return np.exp(np.log(np.array(curves)).mean(axis=0)).tolist()


# --- the experiment -----------------------------------------------------------------------------


def run(config: Config) -> dict:
    tables = [read_table(REPO / p) for p in config.tables]  # REPO / an absolute path: the path
    table, others = tables[0], tables[1:]
    library = load_library(LIBRARY)
    tasks = measured_tasks(library, table, config.tables[0])
    arms = ["persistent", "greedy", "fresh", "uniform"]
    runs: dict[str, list[list[TaskRun]]] = {arm: [] for arm in arms}
    transfer: dict[str, list[list[TaskRun]]] = {}
    oracle = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=fast_scratch()) as scratch:
        for index in range(config.orderings):
            train, test = ordering_of(tasks, config, index)
            for arm in arms:
                runs[arm].append(run_arm(arm, train, test, table, config, Path(scratch), index))
            for number, other in enumerate(others):
                usable = [t for t in train if other.measurement(t.task, NAIVE) is not None]
                name = f"transfer from {other.device}"
                transfer.setdefault(name, []).append(
                    run_arm(
                        "persistent", usable, test, table, config, Path(scratch), index,
                        train_table=other, label=f"transfer{number}",
                    )
                )  # fmt: skip
            oracle.append({t.task: oracle_best(t, table, config) for t in test})
            print(f"ordering {index + 1}/{config.orderings} done", file=sys.stderr, flush=True)
    summary = summarize({**runs, **transfer}, oracle, config)
    comparisons = {
        f"{a} / {b}": paired_ratio(runs, a, b, config)
        for a, b in (("persistent", "fresh"), ("greedy", "fresh"))
    }
    if not others:
        summary["transfer"] = {"skipped": "only one GPU's table: measure another GPU to compare"}
    return {
        "table": {"device": table.device, "arch": table.arch, "note": table.note},
        "config": msgspec.to_builtins(config),
        "budgets": list(range(1, config.budget + 1)),
        "tasks": [t.task for t in tasks],
        "not_fully_measured": [t.task for t in library if t not in tasks],
        "seconds": round(time.perf_counter() - began, 1),
        "arms": summary,
        "comparisons": comparisons,
    }


def measured_tasks(library: list[Task], table: LearningTable, name: str) -> list[Task]:
    """The tasks of `library` that `table` (read from `name`) measures fully. A task half
    measured (a measure run cut short) would replay its missing variants as unreachable and
    bias every arm alike: it takes no part."""
    tasks = [t for t in library if fully_measured(t, table)]
    if len(tasks) < 2:
        raise SystemExit(f"{name} measures {len(tasks)} task(s) fully; need 2 or more")
    return tasks


def fast_scratch() -> str | None:
    """KBs live in memory-backed /dev/shm where there is one: every attempt is an fsync."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = result["budgets"]
    arms = {arm: entry for arm, entry in result["arms"].items() if "skipped" not in entry}
    colors = {arm: f"C{i}" for i, arm in enumerate(arms)}  # one color per arm in every panel
    figure, axes = plt.subplots(2, 2, figsize=(12, 9))
    panels = [
        (axes[0][0], "best_speedup", "held-out geomean best speedup", True),
        (axes[0][1], "regret", "regret vs oracle (oracle / arm)", False),
        (axes[1][0], "wasted_steps", "wasted steps per held-out task", False),
    ]
    for axis, key, title, with_oracle in panels:
        for arm, entry in arms.items():
            if key not in entry or (arm == "oracle" and not with_oracle):
                continue
            mean, (low, high) = entry[key]["mean"], entry[key]["ci95"]
            axis.plot(budgets, mean, label=arm, color=colors[arm], marker="o", markersize=3)
            axis.fill_between(budgets, low, high, color=colors[arm], alpha=0.15)
        axis.set(title=title, xlabel="budget (optimization steps)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axis = axes[1][1]
    for arm, entry in arms.items():
        if "prediction_error_by_position" not in entry:
            continue
        errors = entry["prediction_error_by_position"]
        positions = list(range(1, len(errors["mean"]) + 1))
        axis.plot(positions, errors["mean"], label=arm, color=colors[arm], marker="o", markersize=3)
        axis.fill_between(positions, *errors["ci95"], color=colors[arm], alpha=0.15)
    axis.set(
        title="rank() prediction error |log(predicted/realized)|",
        xlabel="task position in the ordering (training first)",
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.suptitle(f"KB learning curves: {result['table']['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


DEFAULTS = Config(tables=[])


def add_experiment_arguments(parser: argparse.ArgumentParser) -> None:
    """The experiment's options (bench/learning_tune.py takes them too)."""
    parser.add_argument("--orderings", type=int, default=DEFAULTS.orderings)
    parser.add_argument("--train-fraction", type=float, default=DEFAULTS.train_fraction)
    parser.add_argument("--rollouts", type=int, default=DEFAULTS.rollouts)
    parser.add_argument("--depth", type=int, default=DEFAULTS.depth)
    parser.add_argument("--top-k", type=int, default=DEFAULTS.top_k)
    parser.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    parser.add_argument("--exploration", type=float, default=DEFAULTS.exploration)
    parser.add_argument(
        "--avoid-failed",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.avoid_failed,
        help="skip techniques already tried without success on the kernel a step starts from",
    )
    parser.add_argument("--prior-strength", type=float, default=DEFAULTS.prior_strength)
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS.bootstrap)
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed)


def config_of(args: argparse.Namespace, tables: list[Path]) -> Config:
    return Config(
        tables=[repo_relative(t) for t in tables],
        orderings=args.orderings,
        train_fraction=args.train_fraction,
        rollouts=args.rollouts,
        depth=args.depth,
        top_k=args.top_k,
        temperature=args.temperature,
        exploration=args.exploration,
        avoid_failed=args.avoid_failed,
        prior_strength=args.prior_strength,
        bootstrap=args.bootstrap,
        seed=args.seed,
    )


def measured_tables() -> list[Path]:
    """Every bench/results/learning-table-*.json; none: says what to do and exits."""
    tables = sorted(RESULTS.glob("learning-table-*.json"))
    if not tables:
        raise SystemExit(
            "error: no learning table: run bench/learning/measure.py on a GPU first, or pass "
            "--table"
        )
    return tables


def write_result(result: dict, out: Path, image: Path) -> None:
    """The result JSON at `out` and its plot at `image`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(msgspec.json.format(msgspec.json.encode(result), indent=1).decode() + "\n")
    plot(result, image)
    print(f"wrote {out} and {image} in {result['seconds']} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--table",
        action="append",
        type=Path,
        help="a learning table (repeatable; the first is replayed, the others train the "
        "transfer arm); default: every bench/results/learning-table-*.json",
    )
    add_experiment_arguments(parser)
    parser.add_argument("--out", type=Path, help="result JSON (default: under bench/results/)")
    parser.add_argument("--plot", type=Path, help="plot PNG (default: beside the JSON)")
    args = parser.parse_args(argv)
    config = config_of(args, args.table or measured_tables())
    try:
        result = run(config)
    except LibraryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out or RESULTS / f"learning-{slug(result['table']['device'])}.json"
    write_result(result, out, args.plot or out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
