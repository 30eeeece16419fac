"""How a prediction learns from outcomes (kb.ranking.predict, prior_worth): normal-normal
shrinkage of the prior's log gain toward the measured ones, by how closely they agree, on a
real SQLite KB (and PostgreSQL where the tests have one)."""

from __future__ import annotations

import math

import pytest

from kernelblaster.kb.ranking import (
    OTHER_ARCH_WEIGHT,
    OUTCOME_SPREAD,
    PRIOR_STRENGTH,
    predict,
    prior_worth,
)
from kernelblaster.kb.stats import EntryCounts, fold
from tests.kb.kb_helpers import make_attempt

TILING = "shared_memory_tiling"  # its prior on a memory.dram kernel without findings: 2.0x


def _tiling(kb, arch: str = "sm_90"):
    return next(r for r in kb.rank(arch, "memory.dram") if r.technique == TILING)


def _record(kb, speedups, arch="sm_90"):
    for speedup in speedups:
        kb.record(make_attempt(technique=TILING, arch=arch, measured_speedup=speedup))


def test_one_measured_outcome_outweighs_a_prior_far_from_it(kb):
    """A prior is typically off by a factor of ~4 where one kind of kernel's rewrites agree
    within ~30%: after one outcome of 5.8x the gain expected is close to it, not halfway
    from the prior's 2.0x (what a prior worth three outcomes gave: 2.6x)."""
    assert _tiling(kb).gain_if_verified == pytest.approx(2.0)
    _record(kb, [5.8])
    learned = _tiling(kb)
    assert learned.gain_if_verified == pytest.approx(
        math.exp((PRIOR_STRENGTH * math.log(2.0) + math.log(5.8)) / (PRIOR_STRENGTH + 1))
    )
    assert learned.gain_if_verified > 5.0
    assert learned.attempts == 1 and learned.basis == "this_arch"


def test_outcomes_that_scatter_keep_the_priors_pull(kb):
    """Two archs measured the same geometric mean, 4x: four rewrites that agree, and four
    that scatter (1x, 16x, 1x, 16x). The agreeing ones are believed; the scattered ones say
    less, so the prediction stays nearer the prior, and is less certain."""
    _record(kb, [4.0] * 4, arch="sm_90")
    _record(kb, [1.0, 16.0, 1.0, 16.0], arch="sm_80")
    agreeing, scattered = _tiling(kb, "sm_90"), _tiling(kb, "sm_80")
    assert agreeing.mean_speedup == pytest.approx(scattered.mean_speedup) == pytest.approx(4.0)
    assert agreeing.gain_if_verified > 3.95
    assert 2.0 < scattered.gain_if_verified < 3.5
    assert scattered.log_gain_sd > agreeing.log_gain_sd


def test_pooled_evidence_keeps_its_spread(kb):
    """Evidence pooled over other architectures carries the spread between them: 1x twice on
    one arch and 16x twice on another predict, on a third, what the four outcomes folded
    together do (not 4x, as if each arch's agreeing pair made them agree)."""
    _record(kb, [1.0, 1.0], arch="sm_80")
    _record(kb, [16.0, 16.0], arch="sm_86")
    pooled = _tiling(kb, "sm_90")
    assert pooled.basis == "other_archs" and pooled.attempts == 4
    folded = EntryCounts()
    for attempt in kb.attempts():
        fold(folded, attempt)
    expected = predict(2.0, folded, weight=OTHER_ARCH_WEIGHT)
    assert pooled.gain_if_verified == pytest.approx(expected.gain_if_verified)
    assert pooled.log_gain_sd == pytest.approx(expected.log_gain_sd)
    assert pooled.gain_if_verified < 3.3


def test_the_prior_is_worth_prior_strength_outcomes_at_the_typical_spread():
    one = EntryCounts(attempts=1, successes=1, n_measured=1, mean_log_speedup=1.0)
    assert prior_worth(one) == pytest.approx(PRIOR_STRENGTH)
    agreeing = EntryCounts(attempts=4, successes=4, n_measured=4, mean_log_speedup=1.0)
    assert prior_worth(agreeing) == pytest.approx(PRIOR_STRENGTH / 4)
    spread = 2.0 * OUTCOME_SPREAD  # each outcome twice as far from the mean as is typical
    scattered = EntryCounts(
        attempts=4, successes=4, n_measured=4, mean_log_speedup=1.0, m2_log_speedup=4 * spread**2
    )
    assert prior_worth(scattered) > 4 * prior_worth(agreeing)
