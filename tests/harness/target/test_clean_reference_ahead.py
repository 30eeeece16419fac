"""The clean reference process ahead of the check (issue 34: a save's verification must not pay
round trips that can be made before it): a session's sets made ahead are handed over in one
exchange and then need the child no more; a session being made is stopped by a newer one
(a spare whose request needs another reference does not wait for the wrong one); a failed
session says the same failure every time it is asked. Real clean processes on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness.target.clean_reference import CleanReference, CleanReferenceGone
from kernelblaster.harness.target.reference import ReferenceError_

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"
RELU = TARGETS / "relu_ref.py"

# A reference whose get_inputs() notes each call in a file beside it: how far making its
# session got
COUNTED = """
from pathlib import Path
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    with open(Path(__file__).with_suffix(".calls"), "a") as calls:
        calls.write("call\\n")
    import time
    time.sleep(0.3)
    return [torch.randn(1024)]

def get_init_inputs():
    return []
"""


def test_sets_handed_over_ahead_need_the_child_no_more():
    clean = CleanReference("cpu")
    try:
        clean.open(RELU, trials=3, atol=None, rtol=None)
        facts = clean.facts()
        assert facts.ahead_bytes > 0  # a small problem: its sets made ahead
        clean.hand_over_ahead()
        clean._process.kill()  # from here on, any question to the child fails
        clean._process.join()
        warm_up = clean.warm_up()
        trials = [clean.take(index) for index in range(facts.trials + 1)]  # the recheck's too
        assert [t.seed for t in trials] == facts.seeds
        assert warm_up.seed not in facts.seeds
        assert all(isinstance(t.inputs[0], torch.Tensor) for t in trials)
        assert [t.decoy is None for t in trials] == [False, True, False, False]
        assert len({t.expected.key for t in [warm_up, *trials]}) == facts.trials + 2
        with pytest.raises(CleanReferenceGone):
            clean.take(0)  # handed out once: asked again, it is the child's to answer
    finally:
        clean.close()


def test_sets_made_trial_by_trial_are_not_handed_over_ahead(tmp_path):
    """A large problem (its sets ahead would take over AHEAD_MAX_BYTES: 30 M floats a set)
    keeps one trial's sets at a time: nothing is handed over ahead, each trial asks."""
    large = tmp_path / "large_ref.py"
    large.write_text(RELU.read_text().replace("n = 1 << 16", "n = 30_000_000"))
    clean = CleanReference("cpu")
    try:
        clean.open(large, trials=3, atol=None, rtol=None)
        clean.hand_over_ahead()
        assert clean.facts().ahead_bytes == 0
        clean._process.kill()
        clean._process.join()
        with pytest.raises(CleanReferenceGone):
            clean.warm_up()
    finally:
        clean.close()


def test_a_newer_session_stops_the_one_being_made(tmp_path):
    slow = tmp_path / "counted_ref.py"
    slow.write_text(COUNTED)
    calls = slow.with_suffix(".calls")
    clean = CleanReference("cpu")
    try:
        clean.open(slow, trials=3, atol=None, rtol=None)
        # a whole session calls get_inputs() 11 times (the probe, the gate's set, 4 trials'
        # inputs and their 3 decoys...); the newer open comes during the first ones
        while not calls.exists():
            pass
        clean.open(RELU, trials=3, atol=None, rtol=None)
        facts = clean.facts()  # the newer session's
        assert facts.trials == 3 and facts.ahead_bytes > 0
        made = calls.read_text().count("call")
        assert made <= 3, f"the replaced session went on: {made} get_inputs() calls"
    finally:
        clean.close()


def test_a_failed_session_says_its_failure_every_time(tmp_path):
    broken = tmp_path / "broken_ref.py"
    broken.write_text("import torch\nraise ValueError('no reference today')\n")
    clean = CleanReference("cpu")
    try:
        clean.open(broken, trials=3, atol=None, rtol=None)
        clean.hand_over_ahead()  # the failure is kept for the check, not swallowed here
        for _ in range(2):
            with pytest.raises(ReferenceError_, match="no reference today"):
                clean.facts()
    finally:
        clean.close()
