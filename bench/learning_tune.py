r"""Tune the loop's selection on the learning environment, by cross-validation on training tasks.

    python -m bench.learning_tune     # bench/results/learning-tune-<gpu>.json and a plot beside it
    python -m bench.learning_tune --orderings 4 --prior-strengths 3 --temperatures 0,1 \
        --explorations 0,0.25 --avoid-failed-values 0,1 --jobs 2

Per ordering of bench/learning.py's experiment, each setting (PRIOR_STRENGTH, temperature,
exploration, avoid_failed) is scored by k-fold CV within the training tasks; the choice (the
one-standard-error rule, `choose`) is then measured on the held-out tasks it never saw. The same
rule over all orderings gives `recommended`, the candidate for the defaults."""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec
import numpy as np

from bench import learning as experiment
from bench.common import REPO, RESULTS, slug
from kernelblaster.agents.replay.table import (
    LearningTable,
    LibraryError,
    Task,
    load_library,
    read_table,
)

# The learning arm whose training tasks (and, without held_out_default, held-out ones) run with
# the configured selection: the setting under test, everywhere.
TUNED = "persistent_exploring"

SMALL_BUDGET = 4  # the budgets a user waits for: one rollout's steps
GRID = {  # 48 settings
    "prior_strength": [0.03, 0.1, 0.3, 1.0],
    "temperature": [0.0, 0.5, 1.0],
    "exploration": [0.0, 1.0],
    "avoid_failed": [0.0, 1.0],  # no, yes
}
GRID_FLAGS = {
    "prior_strength": "--prior-strengths",
    "temperature": "--temperatures",
    "exploration": "--explorations",
    "avoid_failed": "--avoid-failed-values",
}


class Setting(msgspec.Struct, frozen=True, kw_only=True):
    prior_strength: float
    temperature: float
    exploration: float
    avoid_failed: bool

    @property
    def label(self) -> str:
        return (
            f"prior_strength={self.prior_strength:g} temperature={self.temperature:g} "
            f"exploration={self.exploration:g} avoid_failed={'yes' if self.avoid_failed else 'no'}"
        )


class OrderingTuning(msgspec.Struct, kw_only=True):
    """One ordering: its split, the folds of its training tasks, each setting's CV score, the
    choice, and the held-out runs of the defaults and of the choice."""

    index: int
    train: list[str]
    held_out: list[str]
    folds: list[list[str]]  # of the training tasks only
    scores: dict[str, list[float]]  # setting label -> CV score of each training task
    choice: str
    runs: dict[str, list[experiment.TaskRun]]  # arm -> its runs (training tasks, then held out)
    oracle: dict[str, list[float]]  # held-out task -> the oracle's curve


def settings_grid(grid: dict[str, list[float]], defaults: Setting) -> list[Setting]:
    """Every combination of the grid, the defaults first (a tie goes to them)."""
    combos = [
        Setting(prior_strength=p, temperature=t, exploration=e, avoid_failed=bool(a))
        for p, t, e, a in itertools.product(
            grid["prior_strength"], grid["temperature"], grid["exploration"], grid["avoid_failed"]
        )
    ]
    return [defaults, *(s for s in combos if s != defaults)]


def configured(config: experiment.Config, setting: Setting) -> experiment.Config:
    return msgspec.structs.replace(
        config,
        prior_strength=setting.prior_strength,
        temperature=setting.temperature,
        exploration=setting.exploration,
        avoid_failed=setting.avoid_failed,
        held_out_default=False,  # the setting is tuned for what it does on held-out tasks too
    )


def folds_of(train: list[Task], k: int) -> list[list[Task]]:
    """`train` dealt into min(k, len) folds in its order (fold j: positions j, j + k, ...)."""
    k = max(1, min(k, len(train)))
    return [train[j::k] for j in range(k)]


def small_budget_score(runs: list[experiment.TaskRun], small_budget: int) -> list[float]:
    """Per held-out run: the mean log best speedup over budgets 1..small_budget."""
    return [float(np.mean(np.log(r.best[:small_budget]))) for r in runs if r.held_out]


def cv_scores(
    setting: Setting,
    train: list[Task],
    folds: list[list[Task]],
    table: LearningTable,
    config: experiment.Config,
    scratch: Path,
    index: int,
    small_budget: int,
) -> list[float]:
    """The setting's cross-validated scores within one ordering's training tasks `train`, dealt
    into `folds`, one per training task (in the folds' order, the same for every setting): each
    fold optimized by a persistent KB trained on the other folds' tasks (in the ordering's
    order). With a single fold there is nothing to train on: the KB starts fresh."""
    config = configured(config, setting)
    scores: list[float] = []
    # each setting's KBs in files of their own: a KB left by another setting's run would lend
    # this one its attempts (on these very kernels, too)
    name = re.sub(r"[^A-Za-z0-9.]+", "_", setting.label)
    for number, fold in enumerate(folds):
        others = [t for t in train if t not in fold]
        runs = experiment.run_arm(
            TUNED, others, fold, table, config, scratch, index, label=f"cv{number}-{name}"
        )
        scores += small_budget_score(runs, small_budget)
    return scores


def choose(settings: list[Setting], scores: dict[str, list[float]]) -> Setting:
    """The one-standard-error rule: of the settings whose mean score is within one standard
    error (of the paired difference, over the scored units) of the best mean, the one that
    changes the fewest parameters from the defaults (`settings[0]`), then the best scoring.
    Among settings the data can't tell apart, it keeps what is known over what won by noise."""
    means = {label: float(np.mean(values)) for label, values in scores.items()}
    best = max(settings, key=lambda s: means[s.label])
    top = np.array(scores[best.label])

    def within_noise(setting: Setting) -> bool:
        gap = top - np.array(scores[setting.label])
        error = gap.std(ddof=1) / math.sqrt(len(gap)) if len(gap) > 1 else 0.0
        return float(gap.mean()) <= error

    def changes(setting: Setting) -> int:
        return sum(
            getattr(setting, name) != getattr(settings[0], name) for name in GRID
        )  # fmt: skip

    eligible = [s for s in settings if within_noise(s)]
    return min(eligible, key=lambda s: (changes(s), -means[s.label]))


def tune_ordering(
    index: int,
    tasks: list[Task],
    table: LearningTable,
    config: experiment.Config,
    settings: list[Setting],
    k: int,
    small_budget: int,
) -> OrderingTuning:
    train, test = experiment.ordering_of(tasks, config, index)
    folds = folds_of(train, k)
    with tempfile.TemporaryDirectory(dir=experiment.fast_scratch()) as name:
        scratch = Path(name)
        scores = {
            s.label: cv_scores(s, train, folds, table, config, scratch, index, small_budget)
            for s in settings
        }  # computed from the training tasks alone: `test` is not touched above
        best = choose(settings, scores)
        runs = {}
        for name_, setting in (("defaults", settings[0]), ("tuned", best)):
            for arm, replayed in (("persistent", TUNED), ("fresh", "fresh")):
                runs[f"{arm} ({name_})"] = experiment.run_arm(
                    replayed, train, test, table, configured(config, setting), scratch, index,
                    label=f"{arm}-{name_}",
                )  # fmt: skip
    return OrderingTuning(
        index=index,
        train=[t.task for t in train],
        held_out=[t.task for t in test],
        folds=[[t.task for t in fold] for fold in folds],
        scores=scores,
        choice=best.label,
        runs=runs,
        oracle={t.task: experiment.oracle_best(t, table, config) for t in test},
    )


def tune(
    config: experiment.Config,
    grid: dict[str, list[float]],
    *,
    k: int,
    small_budget: int,
    jobs: int,
) -> dict:
    table = read_table(REPO / config.tables[0])  # relative paths are the repository's
    tasks = experiment.measured_tasks(load_library(experiment.LIBRARY), table, config.tables[0])
    defaults = Setting(
        prior_strength=config.prior_strength,
        temperature=config.temperature,
        exploration=config.exploration,
        avoid_failed=config.avoid_failed,
    )
    settings = settings_grid(grid, defaults)
    began = time.perf_counter()
    indices = range(config.orderings)
    shared = (tasks, table, config, settings, k, small_budget)
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(tune_ordering, i, *shared) for i in indices]
            orderings = [future.result() for future in futures]
    else:
        orderings = [tune_ordering(i, *shared) for i in indices]
    runs = {arm: [o.runs[arm] for o in orderings] for arm in orderings[0].runs}
    summary = experiment.summarize(runs, [o.oracle for o in orderings], config)
    comparisons = {
        f"{a} / {b}": experiment.paired_ratio(runs, a, b, config)
        for a, b in (
            ("persistent (tuned)", "persistent (defaults)"),
            ("persistent (tuned)", "fresh (tuned)"),
            ("persistent (defaults)", "fresh (defaults)"),
            ("fresh (tuned)", "fresh (defaults)"),
        )
    }
    chosen = Counter(o.choice for o in orderings)
    per_ordering = {s.label: [_mean(o.scores[s.label]) for o in orderings] for s in settings}
    mean_scores = {label: round(float(np.mean(v)), 5) for label, v in per_ordering.items()}
    # The defaults to ship: the same rule over every ordering's training-only CV score. Every
    # task is a training task of some ordering, so this choice has no held-out estimate of its
    # own; the nested per-ordering choices above are that estimate.
    recommended = choose(settings, per_ordering)
    return {
        "table": {"device": table.device, "arch": table.arch, "note": table.note},
        "config": msgspec.to_builtins(config),
        "protocol": {
            "folds": k,
            "small_budget": small_budget,
            "score": f"mean over left-out training tasks and budgets 1..{small_budget} of "
            "log(best speedup); chosen per ordering from its training tasks only",
            "rule": "one standard error: of the settings within one standard error of the best "
            "mean score, the one changing the fewest parameters from the defaults",
        },
        "grid": grid,
        "defaults": defaults.label,
        "budgets": list(range(1, config.budget + 1)),
        "tasks": [t.task for t in tasks],
        "orderings": [
            {
                "index": o.index,
                "train": o.train,
                "held_out": o.held_out,
                "folds": o.folds,
                "choice": o.choice,
                "scores": {label: _mean(v) for label, v in o.scores.items()},
                "task_scores": {label: np.round(v, 5).tolist() for label, v in o.scores.items()},
            }
            for o in orderings
        ],
        "choice": {
            "per_ordering": dict(chosen.most_common()),
            "most_chosen": chosen.most_common(1)[0][0],
            "recommended": recommended.label,
            "mean_cv_score": dict(sorted(mean_scores.items(), key=lambda item: -item[1])),
        },
        "seconds": round(time.perf_counter() - began, 1),
        "arms": summary,
        "comparisons": comparisons,
    }


def _mean(values: list[float]) -> float:
    """As written to the JSON (which the choices can be checked against)."""
    return round(float(np.mean(values)), 5)


def _floats(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected numbers separated by commas"
        ) from None
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected non-negative numbers")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, help="a learning table (default: the first "
                        "bench/results/learning-table-*.json)")  # fmt: skip
    # --prior-strength, --temperature, --exploration, --avoid-failed: the setting the tuned one
    # is compared with (the loop's defaults unless told otherwise)
    experiment.add_experiment_arguments(parser)
    parser.set_defaults(
        temperature=experiment.LOOP.temperature, exploration=experiment.LOOP.exploration
    )
    parser.add_argument("--folds", type=int, default=3, help="CV folds of the training tasks")
    parser.add_argument("--small-budget", type=int, default=SMALL_BUDGET)
    for key, flag in GRID_FLAGS.items():
        parser.add_argument(
            flag, dest=f"grid_{key}", type=_floats, default=GRID[key], help="comma-separated grid"
        )
    parser.add_argument("--jobs", type=int, default=1, help="orderings tuned in parallel")
    parser.add_argument("--out", type=Path, help="result JSON (default: under bench/results/)")
    args = parser.parse_args(argv)
    config = experiment.config_of(args, [args.table or experiment.measured_tables()[0]])
    grid = {key: getattr(args, f"grid_{key}") for key in GRID}
    try:
        result = tune(
            config, grid, k=args.folds, small_budget=min(args.small_budget, config.budget),
            jobs=args.jobs,
        )  # fmt: skip
    except LibraryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out or RESULTS / f"learning-tune-{slug(result['table']['device'])}.json"
    # the plot: the tuned arms' held-out curves beside the defaults'
    experiment.write_result(result, out, out.with_suffix(".png"))
    print(f"recommended: {result['choice']['recommended']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
