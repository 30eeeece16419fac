"""Ranking: state and finding matching, ncu estimates, learning from outcomes, selection."""

from __future__ import annotations

import math
from collections import Counter

import msgspec
import numpy as np
import pytest

from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.kb.ranking import (
    OUTCOME_SPREAD,
    PRIOR_STRENGTH,
    expected_improvement,
    ncu_gain,
    select,
)
from tests.kb.kb_helpers import make_attempt


class FakeFinding(msgspec.Struct):
    id: str
    estimated_speedup: float | None = None


def _by_id(ranked):
    return {r.technique: r for r in ranked}


def test_rank_matches_full_state_prefix_and_findings(kb):
    dram = _by_id(kb.rank("sm_90", "memory.dram"))
    assert "coalesce_global_access" in dram and "shared_memory_tiling" in dram
    assert "tensor_cores_mma_ptx" not in dram  # a compute technique
    # a technique aimed at a whole bottleneck matches each of its states
    assert "increase_parallelism" in _by_id(kb.rank("sm_90", "latency.barrier"))
    assert "increase_parallelism" not in _by_id(kb.rank("sm_90", "memory.dram"))
    # a sub-state nothing aims at yet gets the techniques of its bottleneck
    texture = _by_id(kb.rank("sm_90", "memory.texture"))
    assert "kernel_fusion" in texture and "tensor_cores_mma_ptx" not in texture
    with_finding = _by_id(kb.rank("sm_90", "compute.fp32", [FakeFinding("shared_bank_conflicts")]))
    assert "shared_memory_padding" in with_finding
    ranked = kb.rank("sm_90", "memory.dram")
    speeds = [r.predicted_speedup for r in ranked]
    assert speeds == sorted(speeds, reverse=True)


def test_unknown_state_without_findings_offers_every_technique(kb):
    assert len(kb.rank("sm_90", "mystery")) == len(kb.techniques())


def test_ncu_estimate_raises_the_rule_of_thumb_of_the_techniques_addressing_it(kb):
    assert ncu_gain(50.0) == pytest.approx(2.0)
    assert ncu_gain(99.0) == pytest.approx(4.0)  # capped
    assert ncu_gain(None) is None and ncu_gain(0.0) is None
    findings = [FakeFinding("uncoalesced_global_access", estimated_speedup=75.0)]
    ranked = kb.rank("sm_90", "memory.dram", findings)
    top = ranked[0]
    assert top.technique == "coalesce_global_access"
    # the primary fix of a defect: 80% of the way from the catalog's 1.6x to ncu's 4x
    assert top.basis == "ncu_estimate"
    assert top.gain_if_verified == pytest.approx(math.exp(0.2 * math.log(1.6) + 0.8 * math.log(4)))
    assert "uncoalesced_global_access" in top.explanation


def test_ranking_moves_toward_measured_outcomes(kb):
    def rank_of(technique):
        return [r.technique for r in kb.rank("sm_90", "memory.dram")].index(technique)

    assert rank_of("shared_memory_tiling") == 0
    assert rank_of("vectorized_loads") > 5
    before = _by_id(kb.rank("sm_90", "memory.dram"))
    trajectory = []
    for _ in range(12):  # tiling keeps failing to verify or regressing, vectorizing pays off
        kb.record(make_attempt(technique="shared_memory_tiling", outcome="wrong_result"))
        kb.record(
            make_attempt(
                technique="shared_memory_tiling", outcome="regression", measured_speedup=0.7
            )
        )
        kb.record(make_attempt(technique="vectorized_loads", measured_speedup=1.9))
        trajectory.append(_by_id(kb.rank("sm_90", "memory.dram"))["vectorized_loads"])
    after = _by_id(kb.rank("sm_90", "memory.dram"))
    assert after["shared_memory_tiling"].predicted_speedup < 1.0
    assert after["vectorized_loads"].predicted_speedup > 1.6
    assert rank_of("vectorized_loads") == 0
    assert after["vectorized_loads"].basis == "this_arch"
    assert after["vectorized_loads"].mean_speedup == pytest.approx(1.9)
    assert after["shared_memory_tiling"].success_probability == pytest.approx(0.5, abs=0.05)
    confidences = [r.confidence for r in trajectory]
    assert confidences == sorted(confidences) and confidences[-1] > 0.7
    assert before["vectorized_loads"].confidence < confidences[0]
    predictions = [r.predicted_speedup for r in trajectory]
    assert predictions == sorted(predictions)  # monotone toward the measured 1.9x


def test_failures_lower_expected_value(kb):
    base = _by_id(kb.rank("sm_90", "memory.dram"))["coalesce_global_access"]
    for _ in range(5):
        kb.record(make_attempt(outcome="compile_error"))
    after = _by_id(kb.rank("sm_90", "memory.dram"))["coalesce_global_access"]
    assert after.gain_if_verified == pytest.approx(base.gain_if_verified)  # nothing measured
    assert after.success_probability < base.success_probability
    assert after.predicted_speedup < base.predicted_speedup
    assert (after.attempts, after.failures) == (5, 5)


def test_other_architectures_are_a_down_weighted_fallback(kb):
    for _ in range(6):
        kb.record(make_attempt(arch="sm_80", technique="vectorized_loads", measured_speedup=2.5))
    on_h100 = _by_id(kb.rank("sm_90", "memory.dram"))["vectorized_loads"]
    on_a100 = _by_id(kb.rank("sm_80", "memory.dram"))["vectorized_loads"]
    assert on_h100.basis == "other_archs" and on_a100.basis == "this_arch"
    assert 1.15 < on_h100.gain_if_verified < on_a100.gain_if_verified < 2.5
    assert on_h100.confidence < on_a100.confidence
    kb.record(make_attempt(arch="sm_90", technique="vectorized_loads", measured_speedup=1.0))
    assert _by_id(kb.rank("sm_90", "memory.dram"))["vectorized_loads"].basis == "this_arch"


def test_select_is_reproducible_and_without_replacement(kb):
    ranked = kb.rank("sm_90", "memory.dram")
    first = select(ranked, 4, seed=7)
    assert [r.technique for r in first] == [r.technique for r in select(ranked, 4, seed=7)]
    assert len({r.technique for r in first}) == 4
    assert len(select(ranked, 100, seed=1)) == len(ranked)
    assert select(ranked, 0, seed=1) == [] and select([], 3) == []
    assert select(ranked, 3, temperature=0) == ranked[:3]
    draws = {tuple(r.technique for r in select(ranked, 3, seed=s)) for s in range(50)}
    assert len(draws) > 10  # it explores


def test_select_samples_in_proportion_to_predicted_speedup(kb):
    ranked = kb.rank("sm_90", "memory.dram")[:2]
    big = msgspec.structs.replace(ranked[0], predicted_speedup=3.0)
    small = msgspec.structs.replace(ranked[1], predicted_speedup=1.0)
    firsts = Counter(select([big, small], 1, seed=s)[0].technique for s in range(4000))
    assert firsts[big.technique] / 4000 == pytest.approx(0.75, abs=0.03)
    sharp = Counter(
        select([big, small], 1, temperature=0.25, seed=s)[0].technique for s in range(2000)
    )
    assert sharp[big.technique] / 2000 == pytest.approx(81 / 82, abs=0.02)


def test_rank_accepts_the_classifiers_findings(kb):
    from kernelblaster.harness.protocol.records import Finding

    finding = Finding(id="shared_bank_conflicts", estimated_speedup=30.0, lines=[12])
    without = _by_id(kb.rank("sm_90", "memory.shared"))["shared_memory_padding"]
    padding = _by_id(kb.rank("sm_90", "memory.shared", [finding]))["shared_memory_padding"]
    assert padding.basis == "ncu_estimate" and without.basis == "prior"
    assert 1.2 < padding.gain_if_verified < 1 / 0.7  # raised toward ncu's 30% (1.43x)
    assert padding.predicted_speedup > without.predicted_speedup


def test_an_entry_primed_by_the_policy_update_is_ranked_even_off_target(kb):
    kb.set_prior("sm_90", "memory.dram", "tensor_cores_wmma", 1.3, "GEMV rewrite used mma")
    assert _by_id(kb.rank("sm_90", "memory.dram"))["tensor_cores_wmma"].gain_if_verified == 1.3


def test_without_exploration_selection_is_the_top_k_by_prediction(kb):
    """Exploration 0 is the selection the loop had before the bonus existed: the same draws
    from the first top_k of the ranking, seed for seed."""
    ranked = kb.rank("sm_90", "memory.dram")
    for seed in range(40):
        assert select(ranked, 1, top_k=3, seed=seed) == select(ranked[:3], 1, seed=seed)
    assert select(ranked, 2, top_k=3, temperature=0) == ranked[:2]


def _log_excess(margin: float, sd: float) -> float:
    """log E[max(0, X)] for X ~ N(margin, sd^2), by quadrature: the integrand's Gaussian factor
    exp(-margin^2 / 2 sd^2) is taken out, so the far tail is as exact as the rest."""
    x = np.linspace(0.0, max(margin, 0.0) + 12 * sd, 400_001)
    scaled = x * np.exp(-(x * x - 2 * x * margin) / (2 * sd * sd))
    integral = float(np.sum((scaled[1:] + scaled[:-1]) / 2) * (x[1] - x[0]))
    return -(margin**2) / (2 * sd * sd) - math.log(sd * math.sqrt(2 * math.pi)) + math.log(integral)


def test_expected_improvement_is_the_expected_excess_over_the_best_found(kb):
    """The score of a technique on a kernel the search comes back to: P(verified) x E[max(0,
    L - behind)], L its log gain (normal, the prediction's standard deviation times
    `exploration`), `behind` how far the kernel is behind the fastest one found. Checked
    against quadrature from a candidate expected far past the best to one ten deviations
    short of it (where the closed form's terms cancel and the density underflows)."""
    item = _by_id(kb.rank("sm_90", "memory.dram"))["vectorized_loads"]
    prior_sd = OUTCOME_SPREAD / math.sqrt(PRIOR_STRENGTH)
    assert item.log_gain_sd == pytest.approx(prior_sd)
    log_gain = math.log(item.gain_if_verified)
    for exploration in (1.0, 0.5):
        sd = exploration * prior_sd
        for d in (2.0, 0.0, -1.0, -6.0, -10.0, -29.0, -31.0, -40.0):
            behind = log_gain - d * sd
            expected = math.log(item.success_probability) + _log_excess(log_gain - behind, sd)
            got = expected_improvement(item, behind, exploration)
            assert got == pytest.approx(expected, abs=2e-3), (exploration, d)
    # the further behind the best a kernel is, the less any of its candidates is worth
    scores = [expected_improvement(item, behind, 1.0) for behind in (0.0, 0.5, 1.0, 3.0)]
    assert scores == sorted(scores, reverse=True)


def test_a_confident_prediction_the_run_has_beaten_yields_to_an_uncertain_one(kb):
    """Three techniques measured many times (a narrow deviation), a fourth never (the prior's).
    On a kernel's first visit, or without exploration, the best prediction goes first. Back at
    a kernel where the run already holds a kernel faster than the three's predictions, they
    have little to add and the untried one, which may still beat it, is chosen; where none is
    ahead of the kernel, the best prediction comes first again."""
    ranked = kb.rank("sm_90", "memory.dram")[:4]
    tried = [msgspec.structs.replace(r, log_gain_sd=0.05) for r in ranked[:3]]
    fourth = ranked[3]
    assert fourth.predicted_speedup < tried[2].predicted_speedup
    candidates = [*tried, fourth]
    beaten = math.log(tried[0].gain_if_verified) + 0.3  # the run holds a kernel 1.35x faster
    greedy = dict(top_k=3, temperature=0)
    assert select(candidates, 1, **greedy, behind=beaten) == [tried[0]]  # first visit
    assert select(candidates, 1, **greedy, visits=3, behind=beaten) == [tried[0]]
    back = dict(temperature=0, exploration=1.0, visits=3)
    assert select(candidates, 1, **back, behind=beaten) == [fourth]
    assert select(candidates, 1, **back, behind=0.0) == [tried[0]]


def test_a_rollout_back_at_a_kernel_tries_an_untried_branch(kb):
    """The loop's default selection (OptimizeRequest's): on a kernel's first visit the best
    prediction; once a rollout measured a technique there (1.8x, which still leads the
    prediction, and the fastest kernel found), a rollout coming back to the kernel tries one
    never tried there instead of walking the known branch again: not the runner-up measured
    at 1.5x on six other kernels either, which can hardly beat 1.8x. Exploration 0 walks the
    known branch again."""
    from kernelblaster.agents.loop.choice import choose
    from kernelblaster.harness.protocol.records import PerfState

    state = PerfState(
        kernel="k", arch="sm_90", bottleneck="memory", state="memory.dram", summary=""
    )
    defaults = OptimizeRequest(source="", source_text="", kernel="")
    here = dict(
        source_hash="here", kernel_hash="here", k=defaults.top_k, forced=None, seed=1,
        temperature=defaults.temperature,
    )  # fmt: skip
    first = choose(kb, state, **here, exploration=defaults.exploration)
    assert first is not None
    assert first.technique == kb.rank("sm_90", "memory.dram")[0].technique
    kb.record(make_attempt(technique=first.technique, source_hash="here", measured_speedup=1.8))
    again = kb.rank("sm_90", "memory.dram", source_hash="here")
    assert again[0].technique == first.technique  # still the best prediction
    runner_up = again[1].technique
    for number in range(6):
        kb.record(
            make_attempt(technique=runner_up, source_hash=f"other{number}", measured_speedup=1.5)
        )
    assert kb.rank("sm_90", "memory.dram", source_hash="here")[1].technique == runner_up
    behind = math.log(1.8)  # the original, behind the kernel `first` made
    back = choose(kb, state, **here, exploration=defaults.exploration, behind=behind)
    assert back is not None and back.attempts == 0
    assert back.technique not in (first.technique, runner_up)
    assert choose(kb, state, **here, exploration=0.0).technique == first.technique


def test_a_technique_that_failed_on_this_very_kernel_is_not_chosen_again(kb):
    """avoid_failed: the loop's choice skips techniques already tried without success on the
    kernel the step starts from (its source hash), not those that failed on other kernels of
    the same state; a success stays choosable; when everything failed here, none is left."""
    from kernelblaster.agents.loop.choice import choose
    from kernelblaster.harness.protocol.records import PerfState

    state = PerfState(
        kernel="k", arch="sm_90", bottleneck="memory", state="memory.dram", summary=""
    )
    ranked = kb.rank("sm_90", "memory.dram")
    greedy = dict(k=3, forced=None, seed=1, temperature=0, exploration=0.0)
    best = ranked[0].technique
    kb.record(make_attempt(technique=best, source_hash="here", outcome="compile_error"))
    top, second = [r.technique for r in kb.rank("sm_90", "memory.dram")[:2]]
    assert top == best  # one failure does not undo its lead state-wide...
    assert choose(kb, state, source_hash="here", **greedy).technique == second  # ...but here
    assert choose(kb, state, source_hash="elsewhere", **greedy).technique == best
    assert choose(kb, state, source_hash=None, **greedy).technique == best  # the rule is off
    kb.record(
        make_attempt(technique=second, source_hash="here", outcome="regression",
                     measured_speedup=0.9)
    )  # fmt: skip
    third = choose(kb, state, source_hash="here", **greedy).technique
    assert third not in (best, second)
    kb.record(make_attempt(technique=best, source_hash="here", measured_speedup=2.5))
    assert choose(kb, state, source_hash="here", **greedy).technique == best  # a success here
    for ranked_technique in ranked:
        kb.record(
            make_attempt(technique=ranked_technique.technique, source_hash="hopeless",
                         outcome="wrong_result")
        )  # fmt: skip
    # everything failed here: nothing is left to try, a dead end (the loop used to try one of
    # the failures again)
    assert choose(kb, state, source_hash="hopeless", **greedy) is None
    assert choose(kb, state, source_hash=None, **greedy) is not None  # the rule is off


def test_the_classifiers_compute_states_are_catalog_states(kb):
    """harness/analysis/classify.py names compute.lsu (memory instructions keep the SM busy) and
    compute.issue (busy issuing, no pipe metrics); the catalog knows both, so the KB ranks
    what addresses them instead of treating them as unknown: fewer memory instructions
    (128-bit accesses, register reuse) for the first, fewer instructions for the second."""
    known = {state.id for state in kb.states()}
    compute = {f"compute.{pipe}" for pipe in ("fp32", "fp64", "tensor", "xu", "lsu", "issue")}
    assert compute <= known
    lsu = _by_id(kb.rank("sm_90", "compute.lsu"))
    assert {"vectorized_loads", "register_tiling"} <= set(lsu)
    assert "tensor_cores_wmma" not in lsu and "fast_math_intrinsics" not in lsu
    issue = _by_id(kb.rank("sm_90", "compute.issue"))
    assert {"index_strength_reduction", "fma_contraction", "thread_coarsening"} <= set(issue)
    assert "shared_memory_tiling" not in issue


def test_vectorized_loads_address_the_latency_of_a_streaming_kernel(kb):
    """Four times the bytes in flight per load: a long-scoreboard stall raises vectorized loads
    (a secondary finding: less than their primary, LSU queue throttling)."""
    stall = [FakeFinding("stall_long_scoreboard", estimated_speedup=50.0)]
    throttle = [FakeFinding("stall_lg_throttle", estimated_speedup=50.0)]
    plain = _by_id(kb.rank("sm_90", "memory.dram"))["vectorized_loads"]
    stalled = _by_id(kb.rank("sm_90", "memory.dram", stall))["vectorized_loads"]
    throttled = _by_id(kb.rank("sm_90", "memory.dram", throttle))["vectorized_loads"]
    assert plain.gain_if_verified < stalled.gain_if_verified < throttled.gain_if_verified
    assert "stall_long_scoreboard" in stalled.explanation
