"""Does the knowledge base learn? Learning curves of the real loop replayed on a measured table.

    python -m bench.learning                       # every bench/results/learning-table-*.json
    python -m bench.learning --table T.json --orderings 40 --temperature 0.5 --exploration 0.5

The loop, KB, ranking and selection are real; the lowering agent and the harness answer from the
table (agents/replay/mode.py). First the memory ceilings and their gate (learning_eval.py), then,
over N orderings of training and held-out kernels, the arms of docs/learning.md (persistent,
persistent_exploring, fresh, uniform, oracle, transfer) with bootstrap intervals. Writes
bench/results/learning-<gpu>.json and, with matplotlib, a plot."""

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

from bench import learning_eval as evaluation
from bench.common import REPO, RESULTS, repo_relative, slug
from kernelblaster.agents.replay.mode import ReplayStep, ReplayTask
from kernelblaster.agents.replay.table import (
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
# arms whose predictions come from a KB
LEARNING_ARMS = ("persistent", "persistent_exploring", "fresh")
SUMMARY_BUDGETS = (1, 2, 4)
CEILING_GATE = 1.3  # leave-one-out ceiling at budget 2 below which the suite can't show memory
SETTINGS = Settings()
LOOP = OptimizeRequest(source="", source_text="", kernel="")  # the loop's defaults


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    """How the loop runs on one task: the OptimizeRequest fields the bench sets."""

    rollouts: int
    depth: int
    top_k: int
    temperature: float
    exploration: float
    avoid_failed: bool

    @property
    def budget(self) -> int:
        return self.rollouts * self.depth


# What a user's own runs are: OptimizeRequest's defaults, as the CLI and the editor send them.
PRODUCT = Selection(
    rollouts=LOOP.rollouts,
    depth=LOOP.depth,
    top_k=LOOP.top_k,
    temperature=LOOP.temperature,
    exploration=LOOP.exploration,
    avoid_failed=LOOP.avoid_failed,
)


class Config(msgspec.Struct, kw_only=True):
    tables: list[str]
    orderings: int = 40
    train_fraction: float = 0.6  # of each family's kernels
    rollouts: int = 3
    depth: int = 4
    top_k: int = LOOP.top_k
    # The research arm persistent_exploring's selection on training tasks (no product setting):
    # greedy, with twice the default exploration on revisits (kb.ranking.select). The
    # persistent arm trains with the product's (PRODUCT).
    temperature: float = 0.0
    exploration: float = 2.0
    # held-out tasks (every arm but uniform) with the product's default selection
    held_out_default: bool = True
    avoid_failed: bool = LOOP.avoid_failed  # skip what already failed on a step's kernel
    prior_strength: float = ranking.PRIOR_STRENGTH
    bootstrap: int = 2000
    ceiling_seeds: int = 3  # replays per task and ceiling (the noise is the table's spread)
    drop_families: bool = True  # rerun persistent and fresh without each family in turn
    seed: int = 0

    @property
    def budget(self) -> int:
        return self.rollouts * self.depth

    @property
    def held_out_selection(self) -> Selection:
        """The measured protocol (rollouts x depth) with the product's default selection."""
        return msgspec.structs.replace(
            PRODUCT,
            rollouts=self.rollouts,
            depth=self.depth,
            top_k=self.top_k,
            avoid_failed=self.avoid_failed,
        )

    @property
    def configured_selection(self) -> Selection:
        """The protocol with --temperature and --exploration (persistent_exploring's training,
        and what bench/learning_tune.py tunes)."""
        return msgspec.structs.replace(
            self.held_out_selection, temperature=self.temperature, exploration=self.exploration
        )


class TaskRun(msgspec.Struct, kw_only=True):
    """One task optimized by one arm: per step, the best speedup so far and wasted steps."""

    task: str
    family: str
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
    selection: Selection,
    held_out: bool,
    trace: list[ReplayStep] | None = None,
) -> TaskRun:
    """One replay of `task` with `kb` run as `selection` says; `trace`, when given, receives
    what each step tried."""
    replay = ReplayTask(task, table, rng=random.Random(seed))
    request = replay.request(**msgspec.structs.asdict(selection), seed=seed, settings=SETTINGS)
    outcome = replay.optimize(kb, request)
    if outcome.error is not None:
        raise RuntimeError(f"replay of {task.task} failed: {outcome.error}")
    assert len(outcome.steps) == len(replay.steps), "one lowering call per loop step"
    if trace is not None:
        trace += replay.steps
    naive_ms = replay.measured(NAIVE).time_ms
    best, best_measured = 1.0, math.inf  # the loop keeps the fastest *measured* candidate
    run = TaskRun(
        task=task.task, family=task.family, held_out=held_out, best=[], wasted=[], errors=[]
    )
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
    while len(run.best) < selection.budget:  # every rollout stopped early (at the roof)
        run.best.append(best)
        run.wasted.append(wasted)
    return run


def fully_measured(task: Task, table: LearningTable) -> bool:
    variants = [NAIVE, *(v.name for v in task.variant)]
    return all(table.measurement(task.task, v) is not None for v in variants)


def ordering_of(tasks: list[Task], config: Config, index: int) -> tuple[list[Task], list[Task]]:
    """Ordering `index`: each family's kernels shuffled and dealt, train_fraction of them (at
    least one, and one held out where the family has two or more) to training; the training
    tasks in a shuffled order, then the held-out ones."""
    rng = random.Random(config.seed * 100_003 + index)
    train: list[Task] = []
    test: list[Task] = []
    for family in sorted({t.family for t in tasks}):
        members = [t for t in tasks if t.family == family]
        rng.shuffle(members)
        n_train = max(1, min(len(members) - 1, round(config.train_fraction * len(members))))
        train += members[:n_train]
        test += members[n_train:]
    if not test:  # one kernel per family: hold out one of the training tasks
        test.append(train.pop(rng.randrange(len(train))))
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


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
            selection = selection_of(arm, config, held_out=held_out)
            runs.append(
                run_task(
                    task, source, kb, config, seed=seed, selection=selection, held_out=held_out
                )
            )
    finally:
        if kb is not None:
            kb.close()
    return runs


def selection_of(arm: str, config: Config, *, held_out: bool) -> Selection:
    """How `arm` runs a task: uniform alike everywhere among what the ranking offers; the
    persistent arm's (and the transfer arm's) training tasks as a user runs the product
    (PRODUCT), persistent_exploring's with the configured selection; held-out tasks with the
    product's default selection (or, without held_out_default, the configured one: what
    bench/learning_tune.py tunes)."""
    if arm == "uniform":  # every ranked technique alike
        return msgspec.structs.replace(
            config.held_out_selection, top_k=1000, temperature=math.inf, exploration=0.0
        )
    if arm == "fresh" or (held_out and config.held_out_default):
        return config.held_out_selection
    if arm == "persistent" and not held_out:
        return PRODUCT
    return config.configured_selection


def oracle_best(task: Task, table: LearningTable, config: Config) -> list[float]:
    """The best true speedup the loop can reach within each budget: loop-feasible chains
    (learning_eval.reachable) no longer than a rollout (and than the budget)."""
    naive = table.measurement(task.task, NAIVE)
    assert naive is not None and naive.time_ms is not None
    return [
        max(1.0, naive.time_ms / evaluation.best_ms(task.task, table, NAIVE, min(b, config.depth)))
        for b in range(1, config.budget + 1)
    ]


def ceilings(tasks: list[Task], table: LearningTable, config: Config, scratch: Path) -> dict:
    """Replays of every task with the product's default selection and a KB seeded from the
    table, over an empty KB's: seeded with the task's own edges (same kernel) and with every
    other task's (leave-one-out). Per budget, the geomean over tasks of the ratio (each task's
    mean over ceiling_seeds replays)."""
    ranking.PRIOR_STRENGTH = config.prior_strength
    logs: dict[str, dict[str, list[float]]] = {"same_kernel": {}, "leave_one_out": {}, "none": {}}
    for number, task in enumerate(tasks):
        seeds = {
            "same_kernel": [task],
            "leave_one_out": [t for t in tasks if t is not task],
            "none": [],
        }
        for name, seeded in seeds.items():
            curves = []
            for replay in range(config.ceiling_seeds):
                path = scratch / f"ceiling-{name}-{number}-{replay}.sqlite3"
                with KnowledgeBase.open(path) as kb:
                    evaluation.seed_kb(kb, seeded, table, config.depth)
                    seed = config.seed * 7_000_003 + number * 100 + replay
                    run = run_task(
                        task, table, kb, config, seed=seed,
                        selection=config.held_out_selection, held_out=True,
                    )  # fmt: skip
                curves.append(np.log(run.best))
            logs[name][task.task] = np.mean(curves, axis=0).tolist()
    result: dict = {}
    budgets = [b for b in SUMMARY_BUDGETS if b <= config.budget]
    for name in ("same_kernel", "leave_one_out"):
        per_task = {
            t: np.array(logs[name][t]) - np.array(logs["none"][t]) for t in logs[name]
        }  # fmt: skip
        mean = np.exp(np.mean(list(per_task.values()), axis=0))
        result[name] = {str(b): round(float(mean[b - 1]), 4) for b in budgets}
        result[f"{name}_per_task"] = {
            t: {str(b): round(float(np.exp(v[b - 1])), 4) for b in budgets}
            for t, v in per_task.items()
        }
    return result


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


def run_orderings(
    tasks: list[Task],
    table: LearningTable,
    others: list[LearningTable],
    config: Config,
    arms: list[str],
    scratch: Path,
    label: str = "",
) -> tuple[dict[str, list[list[TaskRun]]], list[dict[str, list[float]]]]:
    """Every arm (and a transfer arm per other table) over config.orderings orderings of
    `tasks`, and per ordering the oracle's curve of each held-out task."""
    runs: dict[str, list[list[TaskRun]]] = {arm: [] for arm in arms}
    oracle = []
    for index in range(config.orderings):
        train, test = ordering_of(tasks, config, index)
        for arm in arms:
            runs[arm].append(
                run_arm(arm, train, test, table, config, scratch, index, label=f"{label}{arm}")
            )
        for number, other in enumerate(others):
            usable = [t for t in train if other.measurement(t.task, NAIVE) is not None]
            runs.setdefault(f"transfer from {other.device}", []).append(
                run_arm(
                    "persistent", usable, test, table, config, scratch, index,
                    train_table=other, label=f"{label}transfer{number}",
                )
            )  # fmt: skip
        oracle.append({t.task: oracle_best(t, table, config) for t in test})
        print(f"{label}ordering {index + 1}/{config.orderings} done", file=sys.stderr, flush=True)
    return runs, oracle


def held_out_curves(per_ordering: list[list[TaskRun]]) -> dict[str, list[list[float]]]:
    """Per task: its best-speedup curve in every ordering that held it out, in ordering order."""
    curves: dict[str, list[list[float]]] = {}
    for runs in per_ordering:
        for r in runs:
            if r.held_out:
                curves.setdefault(r.task, []).append(r.best)
    return curves


def ratio_over_tasks(runs: dict[str, list[list[TaskRun]]], config: Config) -> dict:
    """persistent / fresh: per budget the geomean over held-out kernels with a task-level 95%
    bootstrap interval, and each kernel's contribution."""
    per_task = evaluation.per_task_log_ratio(
        held_out_curves(runs["persistent"]), held_out_curves(runs["fresh"])
    )
    curve = evaluation.task_bootstrap(per_task, config.bootstrap, config.seed)
    return {
        "by_budget": evaluation.at_budgets(curve, SUMMARY_BUDGETS),
        "curve": curve,
        "per_task": evaluation.contributions(per_task, SUMMARY_BUDGETS),
    }


def prediction_errors(per_ordering: list[list[TaskRun]]) -> float | None:
    return evaluation.median_error(
        [e for runs in per_ordering for r in runs if r.held_out for e in r.errors]
    )


def run(config: Config) -> dict:
    tables = [read_table(REPO / p) for p in config.tables]  # REPO / an absolute path: the path
    table, others = tables[0], tables[1:]
    library = load_library(LIBRARY)
    tasks = measured_tasks(library, table, config.tables[0])
    arms = ["persistent", "persistent_exploring", "fresh", "uniform"]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=fast_scratch()) as name:
        scratch = Path(name)
        ceiling = ceilings(tasks, table, config, scratch)
        runs, oracle = run_orderings(tasks, table, others, config, arms, scratch)
        dropped = {}
        families = sorted({t.family for t in tasks})
        for family in families if config.drop_families and len(families) > 1 else []:
            kept = [t for t in tasks if t.family != family]
            if len(kept) < 2:
                continue
            without, _ = run_orderings(
                kept, table, [], config, ["persistent", "fresh"], scratch, label=f"no-{family}-"
            )
            dropped[family] = ratio_over_tasks(without, config)["by_budget"]
    summary = summarize(runs, oracle, config)
    learned = ["persistent", "persistent_exploring", *(a for a in runs if a.startswith("transfer"))]
    comparisons = {f"{a} / fresh": paired_ratio(runs, a, "fresh", config) for a in learned}
    # a new user's search against blind choice, ordering by ordering
    comparisons["fresh / uniform"] = paired_ratio(runs, "fresh", "uniform", config)
    if not others:
        summary["transfer"] = {"skipped": "only one GPU's table: measure another GPU to compare"}
    over_tasks = ratio_over_tasks(runs, config)
    loo_at_2 = ceiling["leave_one_out"].get("2", 0.0)
    return {
        "tasks": [t.task for t in tasks],
        "families": {f: [t.task for t in tasks if t.family == f] for f in families},
        "held_out_kernels": [
            sorted(r.task for r in per if r.held_out) for per in runs["persistent"]
        ],
        "ratio_persistent_fresh": over_tasks["by_budget"],
        # the same at every budget (index b - 1): whether memory ever costs a step
        "ratio_persistent_fresh_by_step": over_tasks["curve"],
        "ceiling_leave_one_out": ceiling["leave_one_out"],
        "ceiling_same_kernel": ceiling["same_kernel"],
        "prediction_error": {arm: prediction_errors(runs[arm]) for arm in ("persistent", "fresh")},
        "gate": {
            "leave_one_out_at_2": loo_at_2,
            "threshold": CEILING_GATE,
            "suite_can_show_memory": loo_at_2 >= CEILING_GATE,
        },
        "per_task_persistent_fresh": over_tasks["per_task"],
        "drop_family_persistent_fresh": dropped,
        "ceilings_per_task": {k: v for k, v in ceiling.items() if k.endswith("_per_task")},
        "table": {"device": table.device, "arch": table.arch, "note": table.note},
        "config": msgspec.to_builtins(config),
        "budgets": list(range(1, config.budget + 1)),
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
    parser.add_argument(
        "--held-out-default",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.held_out_default,
        help="held-out tasks with the product's default selection (every arm but uniform)",
    )
    parser.add_argument("--prior-strength", type=float, default=DEFAULTS.prior_strength)
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS.bootstrap)
    parser.add_argument("--ceiling-seeds", type=int, default=DEFAULTS.ceiling_seeds)
    parser.add_argument(
        "--drop-families",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.drop_families,
        help="rerun persistent and fresh with each family left out of the suite in turn",
    )
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
        held_out_default=args.held_out_default,
        prior_strength=args.prior_strength,
        bootstrap=args.bootstrap,
        ceiling_seeds=args.ceiling_seeds,
        drop_families=args.drop_families,
        seed=args.seed,
    )


def measured_tables() -> list[Path]:
    """Every bench/results/learning-table-*.json, the one measuring the most kernels first (it
    is replayed; the others train the transfer arm); none: says what to do and exits."""
    tables = sorted(
        RESULTS.glob("learning-table-*.json"), key=lambda p: (-len(read_table(p).measurements), p)
    )
    if not tables:
        raise SystemExit(
            "error: no learning table: run bench/learning_measure.py on a GPU first, or pass "
            "--table"
        )
    return tables


def write_result(result: dict, out: Path, image: Path) -> None:
    """The result JSON at `out`, then, where matplotlib is installed, its plot at `image`: a
    missing plotting library never costs the result."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(msgspec.json.format(msgspec.json.encode(result), indent=1).decode() + "\n")
    print(f"wrote {out} in {result['seconds']} s")
    try:
        plot(result, image)
    except ImportError as exc:  # plot() imports nothing but matplotlib
        print(f"no plot: matplotlib can't be imported ({exc}; it comes with pip install -e "
              f"'.[dev]'); {image} not drawn")  # fmt: skip
        return
    print(f"wrote {image}")


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
