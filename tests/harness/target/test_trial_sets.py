"""The trials' input sets made ahead (while nvcc builds) and made as each trial starts hold the
same values: the seeds, the decoys on the same trials, the reference's answers; made ahead only
where they all fit in memory, and stopped between sets once the build has failed (CPU, real
reference files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness.target import trial_sets
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.tensor_checks import same_bits
from kernelblaster.harness.target.trial_sets import TrialPlan, decoy_seed, set_bytes

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"
RELU = TARGETS / "relu_ref.py"
CPU = torch.device("cpu")

DOUBLES = """
import torch
calls = 0
class Model(torch.nn.Module):
    def forward(self, x):
        return x.mul_(2.0)  # changes its input
def get_inputs():
    global calls
    calls += 1
    return [torch.randn(256)]
def get_init_inputs():
    return []
"""


def _plan(path: Path = RELU, trials: int = 3) -> TrialPlan:
    return TrialPlan(load_reference(path, CPU), CPU, trials)


def _make_ahead(plan: TrialPlan, abandon=lambda: False) -> None:
    probe = plan.reference.inputs(0, CPU)
    plan.make_ahead(probe, set_bytes(probe), abandon=abandon)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b, strict=True))


def test_sets_made_ahead_hold_what_each_trial_would_have_made():
    ahead, per_trial = _plan(trials=4), _plan(trials=4)
    per_trial.seeds = list(ahead.seeds)
    _make_ahead(ahead)
    assert ahead.made_ahead and not per_trial.made_ahead
    assert len(ahead.seeds) == 5 and len(set(ahead.seeds)) == 5  # 4 trials, then the recheck
    warm_up = ahead.warm_up()
    assert warm_up.seed == decoy_seed(decoy_seed(ahead.seeds[0])) and warm_up.decoy is None
    assert _same(warm_up.expected, per_trial.warm_up().expected)
    for index, seed in enumerate(ahead.seeds):
        made, made_now = ahead.take(index), per_trial.take(index)
        assert made.seed == made_now.seed == seed
        assert _same(made.inputs, made_now.inputs) and _same(made.expected, made_now.expected)
        assert _same(made.inputs, load_reference(RELU, CPU).inputs(seed, CPU))
        # new tensors for trials 0 and 2 and the recheck; 1 and 3 change the previous ones
        reuses = index in (1, 3)
        assert ahead.reuses_previous_inputs(index) == reuses
        assert (made.decoy is None) == (made_now.decoy is None) == reuses
        if not reuses:
            assert _same(made.decoy, made_now.decoy)
            assert _same(made.decoy, load_reference(RELU, CPU).inputs(decoy_seed(seed), CPU))


def test_each_set_made_ahead_is_handed_out_once():
    plan = _plan()
    _make_ahead(plan)
    first = plan.take(0)
    again = plan.take(0)  # made anew: the candidate may have written into the first
    assert first.inputs[0] is not again.inputs[0] and _same(first.inputs, again.inputs)


def test_a_large_problems_sets_are_left_to_their_trials(monkeypatch):
    # issue 32: a problem of gigabytes holds one trial's sets at a time, however much is free
    monkeypatch.setattr(trial_sets, "AHEAD_MAX_BYTES", 1024)
    plan = _plan()
    _make_ahead(plan)
    assert not plan.made_ahead and plan.held_bytes == 0


def test_a_reference_that_leaves_its_inputs_alone_runs_on_them_without_a_copy():
    plan = TrialPlan(load_reference(RELU, CPU), CPU, 3, copies_inputs=False)
    made = plan.take(0)
    assert torch.equal(made.expected[0], torch.relu(made.inputs[0]))


def test_a_reference_that_changes_its_inputs_leaves_the_trials_inputs_pristine(tmp_path):
    path = tmp_path / "doubles_ref.py"
    path.write_text(DOUBLES)
    plan = _plan(path)
    _make_ahead(plan)
    made = plan.take(0)
    drawn = plan.reference.inputs(made.seed, CPU)[0]
    assert same_bits(made.inputs[0], drawn)
    assert torch.equal(made.expected[0], drawn * 2.0)


def test_sets_that_would_not_fit_are_left_to_their_trials(monkeypatch):
    plan = _plan()
    probe = plan.reference.inputs(0, CPU)
    needed = trial_sets.ahead_bytes(plan.trials, set_bytes(probe), set_bytes(probe))
    # warm-up, 3 trials and the recheck: 5 inputs and 5 answers, 3 decoys, 1 copy
    assert needed == (5 + 3 + 1) * set_bytes(probe) + 5 * set_bytes(probe)
    monkeypatch.setattr(trial_sets, "AHEAD_MEMORY_SHARE", 1e-12)
    _make_ahead(plan)
    assert not plan.made_ahead
    assert _same(plan.take(1).inputs, plan.reference.inputs(plan.seeds[1], CPU))


def test_making_ahead_stops_between_sets_once_abandoned(tmp_path):
    path = tmp_path / "doubles_ref.py"
    path.write_text(DOUBLES)
    plan = _plan(path)
    module = plan.reference.module
    asked = []

    def abandon() -> bool:
        asked.append(module.calls)
        return len(asked) > 1  # the build fails while the first trial's sets are made

    before = module.calls
    _make_ahead(plan, abandon)
    # the probe, the warm-up and the first trial's inputs and decoy: nothing after
    assert module.calls - before == 1 + 1 + 2
    assert len(asked) == 2


@pytest.mark.parametrize("trials", [1, 3, 5])
def test_at_least_three_trials_and_one_after_timing(trials):
    plan = _plan(trials=trials)
    assert plan.trials == max(trials, 3) and len(plan.seeds) == plan.trials + 1
    assert not plan.reuses_previous_inputs(plan.trials)  # the recheck: new tensors
