"""bench/learning_tune.py: the grid is scored by cross-validation within each ordering's
training tasks only, the best-scoring setting is chosen, and its held-out curves are reported
beside the defaults'. One run on a synthetic table whose answer is known (greedy selection
reaches the best kernel in one step, any sampling can miss it), one at CI size on the fixture
table."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import numpy as np
import pytest

from kernelblaster.agents.replay.table import (
    LearningTable,
    Measurement,
    load_library,
    source_digest,
    transitions,
    write_table,
)
from tests.agents.replay.fixture_table import LIBRARY, perf_state
from tests.tests_paths import REPO

# the bench scripts these tests run draw their plots with matplotlib (the [dev] extra)
pytest.importorskip("matplotlib", reason="the bench scripts draw plots: pip install -e '.[dev]'")

UNCOALESCED = ("memory.l1", [("uncoalesced_global_access", 80.0)])


def known_answer_table() -> LearningTable:
    """Nine tasks whose naive kernel has one fix: coalescing, which the cold-start ranking puts
    first (uncoalesced access is its primary finding) and which reaches a kernel at the roof 10x
    faster (so does a layout change, second in the ranking, where the library has that edge).
    Every other rewrite computes the wrong result. Greedy selection (temperature 0) therefore
    reaches the best kernel at the first step of every task, the best score there is; a high
    temperature samples nearly uniformly among the top 3 of the library's rewrites (the loop
    is offered those only), and in each of these tasks one of them fails."""
    tasks = [t for t in load_library(LIBRARY) if t.task in KNOWN_ANSWER_TASKS]
    table = LearningTable(
        device="Synthetic GPU (test)", arch="sm_90", min_speedup=1.02, note="synthetic"
    )
    for task in tasks:
        fix = next(v for s, tech, v in task.edges() if (s, tech) == ("naive", COALESCE))
        for variant in ["naive", *(v.name for v in task.variant)]:
            entry = Measurement(
                task=task.task,
                variant=variant,
                source_sha256=source_digest(task.source_text(variant)),
                outcome="verified" if variant in ("naive", fix) else "wrong",
            )
            if entry.outcome == "verified":
                entry.time_ms, entry.spread, entry.repetitions = (
                    (1.0, 0.01, 100) if variant == "naive" else (0.1, 0.01, 100)
                )
                entry.state = perf_state(
                    task.task,
                    UNCOALESCED if variant == "naive" else ("memory.dram", []),
                    variant != "naive",
                )
            table.measurements.append(entry)
    table.transitions = transitions(tasks, table)
    return table


COALESCE = "coalesce_global_access"
KNOWN_ANSWER_TASKS = (
    "batched_transpose",
    "linear_relu",
    "logsumexp",
    "nchw_to_nhwc",
    "nhwc_to_nchw",
    "rmsnorm",
    "row_sum",
    "softmax",
    "transpose",
)


def _tune(tmp_path, table_path, *options: str) -> dict:
    out = tmp_path / "tune.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.learning_tune", "--table", str(table_path),
         "--out", str(out), *options],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def _check_protocol(result: dict) -> None:
    """What every tuning run must hold: CV folds are made of training tasks only and cover
    them; every setting is scored, once per training task; the choice is the rule's on those
    scores, per ordering and over all of them."""
    from bench import learning_tune as tune

    labels = list(result["orderings"][0]["scores"])
    assert labels[0] == result["defaults"]
    settings = [_setting(tune, label) for label in labels]
    for ordering in result["orderings"]:
        train, held_out = set(ordering["train"]), set(ordering["held_out"])
        assert train and held_out and not train & held_out
        folded = [task for fold in ordering["folds"] for task in fold]
        assert sorted(folded) == sorted(train), "the folds are the training tasks, each once"
        scores = ordering["task_scores"]
        assert list(scores) == labels and all(len(v) == len(train) for v in scores.values())
        assert ordering["choice"] == tune.choose(settings, scores).label
    counts = result["choice"]["per_ordering"]
    assert sum(counts.values()) == len(result["orderings"])
    assert result["choice"]["most_chosen"] == max(counts, key=lambda label: counts[label])
    overall = {label: [o["scores"][label] for o in result["orderings"]] for label in labels}
    assert result["choice"]["recommended"] == tune.choose(settings, overall).label


def _setting(tune, label: str):
    values = dict(part.split("=") for part in label.split())
    return tune.Setting(
        prior_strength=float(values["prior_strength"]),
        temperature=float(values["temperature"]),
        exploration=float(values["exploration"]),
        avoid_failed=values["avoid_failed"] == "yes",
    )


def test_tuning_picks_the_setting_known_to_be_best(tmp_path):
    path = tmp_path / "learning-table-synthetic.json"
    write_table(path, known_answer_table())
    result = _tune(
        tmp_path, path,
        "--orderings", "4", "--train-fraction", "0.8", "--rollouts", "2", "--depth", "2",
        "--folds", "4", "--prior-strength", "3", "--temperature", "8", "--exploration", "0",
        "--no-avoid-failed", "--prior-strengths", "3", "--temperatures", "0,8",
        "--explorations", "0", "--avoid-failed-values", "0",
        "--small-budget", "2", "--bootstrap", "100",
    )  # fmt: skip
    _check_protocol(result)
    greedy = "prior_strength=3 temperature=0 exploration=0 avoid_failed=no"
    sampling = "prior_strength=3 temperature=8 exploration=0 avoid_failed=no"
    assert result["defaults"] == sampling
    for ordering in result["orderings"]:
        # greedy reaches the 10x kernel at step 1 of every left-out task: the best score
        assert ordering["scores"][greedy] == pytest.approx(np.log(10.0), abs=0.05)
        assert ordering["scores"][sampling] <= ordering["scores"][greedy]
    assert result["choice"]["most_chosen"] == greedy  # a tie would go to the defaults
    assert result["choice"]["recommended"] == greedy
    arms = result["arms"]
    assert arms["oracle"]["best_speedup"]["mean"][0] == pytest.approx(10, rel=0.01)
    ratio = result["comparisons"]["persistent (tuned) / persistent (defaults)"]
    assert ratio["mean"][0] > 1 and ratio["orderings_behind"][0] == 0


def test_a_ci_sized_tuning_run_on_the_fixture_table(tmp_path, table_path):
    result = _tune(
        tmp_path, table_path,
        "--orderings", "2", "--rollouts", "1", "--depth", "3", "--folds", "2",
        "--prior-strengths", "0.1", "--temperatures", "0,1", "--explorations", "0,1",
        "--avoid-failed-values", "0,1", "--bootstrap", "50",
    )  # fmt: skip
    _check_protocol(result)
    assert len(result["orderings"][0]["scores"]) == 8  # 1 x 2 x 2 x 2, the defaults among them
    assert result["protocol"]["folds"] == 2 and result["protocol"]["small_budget"] == 3
    arms = result["arms"]
    assert set(arms) == {
        "oracle", "persistent (defaults)", "fresh (defaults)", "persistent (tuned)",
        "fresh (tuned)",
    }  # fmt: skip
    oracle = np.array(arms["oracle"]["per_ordering"])
    for arm, entry in arms.items():
        best = np.array(entry["per_ordering"])
        assert best.shape == (2, 3) and (best >= 1).all() and (best <= oracle + 1e-9).all(), arm
    assert "prediction_error_by_position" in arms["persistent (tuned)"]
    assert (tmp_path / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_grid_values_must_be_numbers(tmp_path, table_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench.learning_tune", "--table", str(table_path),
         "--temperatures", "0,warm"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "'0,warm': expected numbers separated by commas" in done.stderr


def test_the_choice_keeps_the_defaults_unless_the_data_tell_the_settings_apart():
    """One standard error: a setting ahead of the defaults by less than the noise of the
    difference does not replace them; one ahead on every unit does; among settings within the
    noise of the best, the one that changes the fewest parameters is kept."""
    from bench import learning_tune as tune

    def setting(t: float, e: float = 0.0) -> object:
        return tune.Setting(prior_strength=3, temperature=t, exploration=e, avoid_failed=False)

    defaults, greedy, both = setting(1.0), setting(0.0), setting(0.0, 0.5)
    settings = [defaults, greedy, both]
    noisy = {defaults.label: [1.0, 2.0, 1.0, 2.0], greedy.label: [2.0, 1.0, 2.1, 1.0],
             both.label: [0.0, 0.0, 0.0, 0.0]}  # fmt: skip
    assert tune.choose(settings, noisy) == defaults  # greedy's lead (0.025) is noise
    clear = {defaults.label: [1.0, 1.2, 0.9, 1.1], greedy.label: [1.5, 1.6, 1.6, 1.4],
             both.label: [1.7, 1.5, 1.5, 1.55]}  # fmt: skip
    # both is best by a hair; greedy is within its noise and changes one parameter, not two
    assert tune.choose(settings, clear) == greedy
    assert tune.choose([greedy], {greedy.label: [1.0]}) == greedy  # one unit: no error bar


def test_folds_deal_the_training_tasks_in_order():
    from bench import learning_tune as tune

    tasks = [msgspec.structs.replace(t, task=f"t{i}") for i, t in enumerate(load_library(LIBRARY))]
    folds = tune.folds_of(tasks[:7], 3)
    assert [[t.task for t in fold] for fold in folds] == [
        ["t0", "t3", "t6"], ["t1", "t4"], ["t2", "t5"],
    ]  # fmt: skip
    assert len(tune.folds_of(tasks[:2], 3)) == 2  # never an empty fold
