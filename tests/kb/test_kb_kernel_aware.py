"""Kernel-aware learning: the KB learns a technique's gain per target finding (the kernel's
finding the technique was aimed at), so what it realized on kernels with one defect is not
expected of kernels of the same state without it, and the ranking says which attempts a
prediction rests on. The findings are those the H100 learning table measured
(bench/results/learning-table-nvidia-h100-80gb-hbm3.json)."""

from __future__ import annotations

import msgspec
import pytest

from kernelblaster.kb.catalog import load_catalog
from kernelblaster.kb.ranking import target_finding
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.transfer import export_kb, merge_kb
from tests.kb.kb_helpers import make_attempt, refolded_counts, stored_counts

SMALL_GRID = "launch.small_grid"
COALESCE = "coalesce_global_access"


class FakeFinding(msgspec.Struct):
    id: str
    estimated_speedup: float | None = None


# The naive softmax: a thread per row, loads and stores using 4 of 32 bytes per sector.
SOFTMAX = [
    FakeFinding("uncoalesced_global_access", 87.2),
    FakeFinding("low_achieved_occupancy", 80.0),
    FakeFinding("low_issue_utilization", 80.0),
    FakeFinding("stall_long_scoreboard", 78.0),
    FakeFinding("small_grid", 76.0),
]
# The naive column sum: the same state, a thread per column, already coalesced.
COL_SUM = [
    FakeFinding("low_achieved_occupancy", 72.0),
    FakeFinding("low_issue_utilization", 72.0),
    FakeFinding("stall_long_scoreboard", 72.0),
    FakeFinding("small_grid", 52.0),
]


def _ranked(kb, findings, technique=COALESCE, *, arch="sm_90", state=SMALL_GRID):
    return next(r for r in kb.rank(arch, state, findings) if r.technique == technique)


def _coalescing_paid_on_uncoalesced_kernels(kb, **fields):
    for kernel, speedup in (("softmax", 19.3), ("layernorm", 22.4), ("row_sum", 5.4)):
        kb.record(
            make_attempt(
                kernel=kernel,
                before_state=SMALL_GRID,
                technique=COALESCE,
                measured_speedup=speedup,
                target_finding="uncoalesced_global_access",
                **fields,
            )
        )


def test_a_gain_learned_on_kernels_with_a_finding_is_not_expected_of_kernels_without_it(kb):
    untried = _ranked(kb, COL_SUM)
    _coalescing_paid_on_uncoalesced_kernels(kb)
    on_softmax = _ranked(kb, SOFTMAX)
    assert on_softmax.target_finding == "uncoalesced_global_access"
    assert on_softmax.basis == "this_arch" and on_softmax.attempts == 3
    assert on_softmax.predicted_speedup > 5.0  # from its prior (3.3x) toward 19x, 22x and 5x
    assert on_softmax.evidence == "3 attempts on sm_90 on kernels with uncoalesced_global_access"
    assert on_softmax.evidence in on_softmax.explanation
    # the column sum has nothing to coalesce: coalescing is aimed at its long-scoreboard
    # stalls there, and what it did for uncoalesced kernels is not expected of it
    on_col_sum = _ranked(kb, COL_SUM)
    assert on_col_sum.target_finding == "stall_long_scoreboard"
    assert on_col_sum.predicted_speedup == pytest.approx(untried.predicted_speedup)
    assert on_col_sum.predicted_speedup < 2.0
    assert on_col_sum.basis == untried.basis == "ncu_estimate" and on_col_sum.attempts == 0
    assert on_col_sum.evidence == (
        "no attempts yet on kernels with stall_long_scoreboard; "
        "3 on kernels with other findings not counted"
    )
    assert on_col_sum.evidence in on_col_sum.explanation


def test_attempts_on_kernels_with_the_same_finding_are_what_the_prediction_learns(kb):
    _coalescing_paid_on_uncoalesced_kernels(kb)
    for _ in range(4):
        kb.record(
            make_attempt(
                kernel="col_sum",
                before_state=SMALL_GRID,
                technique=COALESCE,
                outcome="regression",
                measured_speedup=0.95,
                target_finding="stall_long_scoreboard",
            )
        )
    on_col_sum = _ranked(kb, COL_SUM)
    assert (on_col_sum.attempts, on_col_sum.regressions) == (4, 4)
    assert on_col_sum.mean_speedup == pytest.approx(0.95)
    assert on_col_sum.predicted_speedup < 1.3
    assert on_col_sum.evidence == (
        "4 attempts on sm_90 on kernels with stall_long_scoreboard; "
        "3 on kernels with other findings not counted"
    )
    assert _ranked(kb, SOFTMAX).predicted_speedup > 5.0  # the uncoalesced kernels own record


def test_a_kernel_with_no_finding_a_technique_addresses_learns_apart(kb):
    kb.record(make_attempt(technique="vectorized_loads", measured_speedup=1.9, target_finding=""))
    plain = _ranked(kb, [], "vectorized_loads", state="memory.dram")
    stalled = _ranked(
        kb, [FakeFinding("stall_lg_throttle", 40.0)], "vectorized_loads", state="memory.dram"
    )
    assert plain.target_finding == "" and plain.attempts == 1
    assert plain.evidence == "1 attempt on sm_90 on kernels with no finding it addresses"
    assert stalled.target_finding == "stall_lg_throttle" and stalled.attempts == 0


def test_the_target_is_the_finding_addressed_most_directly_that_ncu_estimates_a_saving_for():
    coalesce = next(t for t in load_catalog().technique if t.id == COALESCE)
    both = {"uncoalesced_global_access": 4.0, "stall_long_scoreboard": 3.5}
    assert target_finding(coalesce, both) == "uncoalesced_global_access"  # its primary, a defect
    # loads using 18 of 32 bytes per sector, but ncu's rule did not fire (no estimate)
    weak = {"uncoalesced_global_access": None, "stall_long_scoreboard": 3.5}
    assert target_finding(coalesce, weak) == "stall_long_scoreboard"
    assert target_finding(coalesce, {"small_grid": 2.0}) == ""


def test_other_architectures_with_the_same_finding_come_before_unrecorded_attempts(kb):
    kb.record(make_attempt(before_state=SMALL_GRID, measured_speedup=1.0))  # target unrecorded
    assert "kernels whose findings were not recorded" in _ranked(kb, SOFTMAX).evidence
    _coalescing_paid_on_uncoalesced_kernels(kb, arch="sm_80")
    on_h100 = _ranked(kb, SOFTMAX)
    assert on_h100.basis == "other_archs" and on_h100.attempts == 3
    assert on_h100.evidence == (
        "3 attempts on other architectures (weighted 0.5) on kernels with uncoalesced_global_access"
    )


def test_attempts_without_their_target_keep_teaching_until_targeted_ones_arrive(kb):
    """What callers without a profile record (and what KBs before schema 4 hold) still counts
    for every kernel, as it did, until attempts aimed at the kernel's finding exist."""
    for _ in range(3):
        kb.record(make_attempt(before_state=SMALL_GRID, measured_speedup=12.0))
    legacy = _ranked(kb, COL_SUM)
    assert legacy.basis == "this_arch" and legacy.attempts == 3 and legacy.predicted_speedup > 4
    assert legacy.evidence == "3 attempts on sm_90 on kernels whose findings were not recorded"
    kb.record(
        make_attempt(
            before_state=SMALL_GRID,
            outcome="compile_error",
            target_finding="stall_long_scoreboard",
        )
    )
    targeted = _ranked(kb, COL_SUM)
    assert (targeted.attempts, targeted.failures) == (1, 1)
    assert targeted.predicted_speedup < legacy.predicted_speedup


def test_no_attempt_may_claim_the_key_of_unrecorded_targets(kb):
    with pytest.raises(ValueError, match="target_finding '\\(not recorded\\)' is reserved"):
        kb.record(make_attempt(target_finding="(not recorded)"))
    assert kb.attempts() == []


def test_a_merge_refolds_the_counts_per_target_finding(kb, new_location):
    _coalescing_paid_on_uncoalesced_kernels(kb)
    kb.record(
        make_attempt(before_state=SMALL_GRID, outcome="wrong_result", target_finding="small_grid")
    )
    with KnowledgeBase.open(new_location("merged")) as merged:
        merge_kb(merged, export_kb(kb))
        merge_kb(merged, export_kb(kb))  # twice: nothing counted twice
        assert stored_counts(merged) == refolded_counts(merged) == stored_counts(kb)
        for findings in (SOFTMAX, COL_SUM):
            ours, theirs = _ranked(kb, findings), _ranked(merged, findings)
            assert theirs.predicted_speedup == pytest.approx(ours.predicted_speedup)
            assert theirs.evidence == ours.evidence
        (attempt,) = [a for a in merged.attempts() if a.outcome == "wrong_result"]
        assert attempt.target_finding == "small_grid"


# --- pooling across states: the same fix of the same finding on kernels of other states -----


def test_a_technique_aimed_at_a_finding_learns_from_other_states_until_its_own_has_evidence(kb):
    """Transfer between kernels whose states differ: coalescing that paid on uncoalesced
    small-grid kernels is expected, pooled and down-weighted, on an uncoalesced kernel of
    another state; as soon as that state has its own attempts, they alone count."""
    transpose_state = "memory.l2"
    untried = _ranked(kb, SOFTMAX, state=transpose_state)
    _coalescing_paid_on_uncoalesced_kernels(kb)
    pooled = _ranked(kb, SOFTMAX, state=transpose_state)
    assert pooled.basis == "other_states" and pooled.attempts == 3
    assert "kernels of other states (weighted 0.5)" in pooled.evidence
    assert pooled.gain_if_verified > untried.gain_if_verified
    exact = _ranked(kb, SOFTMAX)  # the state the attempts were made in: full weight
    assert exact.basis == "this_arch" and exact.gain_if_verified > pooled.gain_if_verified
    # the other state's own evidence (a dead end) takes over from the pooled one
    kb.record(
        make_attempt(
            kernel="transpose",
            before_state=transpose_state,
            technique=COALESCE,
            measured_speedup=1.0,
            target_finding="uncoalesced_global_access",
        )
    )
    own = _ranked(kb, SOFTMAX, state=transpose_state)
    assert own.basis == "this_arch" and own.attempts == 1
    assert own.gain_if_verified < pooled.gain_if_verified


def test_pooling_across_states_keeps_findings_apart(kb):
    """What coalescing realized aimed at uncoalesced accesses is not expected, in another
    state, of a kernel without them (col_sum's findings)."""
    _coalescing_paid_on_uncoalesced_kernels(kb)
    other = _ranked(kb, COL_SUM, state="memory.dram")
    assert other.basis != "other_states" and other.attempts == 0


def test_a_kernels_own_attempts_count_first_so_sibling_rewrites_are_not_conflated(kb):
    """linear_relu's tiling: from the naive GEMM it verified (7.7x, 3 times), from the fused
    one it computed the wrong thing (3 times). One key pools them (P(verified) ~0.6 for both);
    ranked for one of the two kernels, that kernel's own attempts count."""
    for source, outcome, speedup in (("naive", "success", 7.7), ("fused", "wrong_result", None)):
        for _ in range(3):
            kb.record(
                make_attempt(
                    kernel="linear_relu",
                    source_hash=source,
                    before_state="memory.l1",
                    technique="shared_memory_tiling",
                    outcome=outcome,
                    measured_speedup=speedup,
                    target_finding="uncoalesced_global_access",
                )
            )
    findings = [FakeFinding("uncoalesced_global_access", 57.6)]

    def tiling(**kwargs):
        ranked = kb.rank("sm_90", "memory.l1", findings, **kwargs)
        return next(r for r in ranked if r.technique == "shared_memory_tiling")

    pooled = tiling()
    assert pooled.basis == "this_arch" and 0.4 < pooled.success_probability < 0.7
    naive, fused = tiling(source_hash="naive"), tiling(source_hash="fused")
    assert naive.basis == fused.basis == "this_kernel"
    assert naive.success_probability > 0.8 > pooled.success_probability
    assert fused.success_probability <= 0.3 and fused.predicted_speedup < naive.predicted_speedup
    assert tiling(source_hash="never seen").basis == "this_arch"
