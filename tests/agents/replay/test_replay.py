"""The replay mode: the real loop, KB, ranking and selection on a table, through
run_optimization()'s lowering and evaluation injection points."""

from __future__ import annotations

import math

import pytest

from kernelblaster.agents.llm.client import LlmError
from kernelblaster.agents.loop.plan import CHAIN_DISCOUNT, MIN_SPEEDUP, every_technique
from kernelblaster.agents.loop.rollout import credited_speedup
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.agents.replay.mode import ReplayModel
from kernelblaster.agents.replay.table import LibraryError, transitions
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.settings import Settings


def run(
    replay,
    kb,
    *,
    rollouts=1,
    depth=1,
    k=3,
    seed=1,
    technique=None,
    temperature=1.0,
    offered=False,
):
    request = OptimizeRequest(
        source=str(replay.source),
        source_text=replay.naive_text,
        kernel=replay.task.task,
        technique=technique,
        rollouts=rollouts,
        depth=depth,
        top_k=k,
        seed=seed,
        temperature=temperature,
        settings=Settings(),
    )
    return run_optimization(
        OptimizeRun(
            request=request,
            client=ReplayModel(),
            kb=kb,
            evaluate=replay.evaluate,
            lower=replay.lower,
            offered=replay.offered if offered else every_technique,
        )
    )


def test_a_step_returns_the_librarys_variant_and_records_its_measured_outcome(replay_of, kb):
    replay = replay_of("softmax")
    outcome = run(replay, kb, technique="coalesce_global_access")
    assert outcome.error is None
    (step,) = outcome.steps
    assert (replay.steps[0].source, replay.steps[0].target) == ("naive", "block_row")
    assert step.outcome == "success" and step.state_after == "latency.barrier"
    assert step.state_before == "launch.small_grid"
    # 2.9 ms -> 0.125 ms, each drawn with a 2% log-normal spread
    assert step.measured_speedup == pytest.approx(2.9 / 0.125, rel=0.15)
    assert outcome.improved and "softmax_block" in outcome.best_source
    (attempt,) = kb.attempts()
    assert (attempt.technique, attempt.outcome, attempt.after_state) == (
        "coalesce_global_access",
        "success",
        "latency.barrier",
    )
    # the naive softmax's uncoalesced accesses: what the KB learns this gain for
    assert step.target_finding == attempt.target_finding == "uncoalesced_global_access"


def test_failures_are_the_tables_and_a_missing_rewrite_spends_the_step(replay_of, kb):
    replay = replay_of("softmax")
    outcomes = {}
    for technique in ("warp_shuffle_reduction", "tensor_cores_wmma"):
        outcomes[technique] = run(replay, kb, technique=technique).steps[0]
    assert outcomes["warp_shuffle_reduction"].outcome == "compile_error"  # host_helper
    assert "build_error (test fixture)" in outcomes["warp_shuffle_reduction"].detail
    assert outcomes["tensor_cores_wmma"].outcome == "error"  # nothing in the library
    assert "no rewrite of naive by tensor_cores_wmma" in outcomes["tensor_cores_wmma"].detail
    assert [s.target for s in replay.steps] == ["host_helper", None]
    entry = kb.entry("sm_90", "launch.small_grid", "warp_shuffle_reduction")
    assert (entry.attempts, entry.failures) == (1, 1)

    (wrong,) = run(replay_of("gelu"), kb, technique="fast_math_intrinsics").steps
    assert wrong.outcome == "wrong_result"  # tanh_fast
    assert kb.entry("sm_90", "memory.dram", "fast_math_intrinsics").failures == 1


def test_two_step_paths_follow_the_current_variant(replay_of, kb):
    replay = replay_of("softmax")
    # greedy and forced first step: block_row, then the KB's best for its state
    outcome = run(replay, kb, technique="coalesce_global_access", depth=3, temperature=0.0)
    sources = [s.source for s in replay.steps]
    assert sources[0] == "naive" and sources[1] == "block_row"
    for step, scripted in zip(outcome.steps, replay.steps, strict=True):
        if step.outcome == "success":
            assert scripted.target is not None and scripted.time_ms is not None


def test_greedy_selection_takes_the_top_ranked_technique(replay_of, kb):
    replay = replay_of("matmul")
    state = replay.measured("naive").state
    top = kb.rank(state.arch, state.state, state.findings)[0].technique
    run(replay, kb, temperature=0.0, seed=5)
    assert replay.steps[0].technique == top


def test_replay_is_reproducible_and_noisy_at_the_measured_spread(replay_of, tmp_path):
    from kernelblaster.kb.store import KnowledgeBase

    def times(seed):
        replay = replay_of("row_sum", seed=seed)
        with KnowledgeBase.open(tmp_path / f"kb-{seed}.sqlite3") as kb:
            outcome = run(replay, kb, technique="coalesce_global_access", seed=seed)
        return outcome.original_time_ms, replay.steps[0].time_ms

    assert times(3) == times(3)
    draws = [times(seed)[1] for seed in range(4, 24)]
    logs = [math.log(t / 0.092) for t in draws]
    assert len(set(draws)) == len(draws)
    assert max(abs(x) for x in logs) < 5 * 0.02  # within five standard deviations


def test_the_transitions_follow_the_measurements(library, table):
    derived = {(t.task, t.source, t.technique): t for t in transitions(library, table)}
    success = derived["softmax", "naive", "coalesce_global_access"]
    assert (success.target, success.outcome) == ("block_row", "success")
    assert success.speedup == pytest.approx(2.9 / 0.125)
    assert derived["gelu", "naive", "thread_coarsening"].outcome == "regression"  # 0.99x
    assert derived["matmul", "smem_tiled", "tensor_cores_wmma"].outcome == "wrong"
    assert derived["row_sum", "naive", "warp_shuffle_reduction"].outcome == "build_error"
    assert not any(t.task == "transpose" for t in derived.values())  # not in the fixture


def test_the_replay_model_answers_only_what_the_replay_needs():
    model = ReplayModel()
    assert '"ok": true' in model.chat([], purpose="soft_verify").text
    with pytest.raises(LlmError, match="no model for 'lowering'"):
        model.chat([], purpose="lowering")


def test_a_source_that_is_no_variant_is_refused(replay_of):
    replay = replay_of("gelu")
    with pytest.raises(LibraryError, match="no variant of it"):
        replay.evaluate(replay.source, "// something else\n", "gelu", Settings())


def test_the_replayed_state_carries_the_chain_the_variant_launches(library, table):
    """As the live evaluation does, the replay adds kernel_chain from the variant's measured
    kernels (bias_gelu_scale's naive form on the H100: three passes of about equal length)."""
    import random

    import msgspec

    from kernelblaster.agents.replay.mode import ReplayTask

    task = next(t for t in library if t.task == "softmax")
    naive = table.measurement("softmax", "naive")
    chained = msgspec.structs.replace(
        naive, kernel_ns={"row_max": 119_360.0, "row_exp_sum": 114_112.0, "row_div": 108_384.0}
    )
    replayed = msgspec.structs.replace(
        table, measurements=[chained if m is naive else m for m in table.measurements]
    )
    replay = ReplayTask(task, replayed, rng=random.Random(0))
    state = replay.evaluate(replay.source, replay.naive_text, None, Settings()).state
    chain = next(f for f in state.findings if f.id == "kernel_chain")
    assert chain.estimated_speedup == pytest.approx(100 * (1 - 119_360 / 341_856))
    single = ReplayTask(task, table, rng=random.Random(0))
    alone = single.evaluate(single.source, single.naive_text, None, Settings()).state
    assert "kernel_chain" not in {f.id for f in alone.findings}


def test_the_loop_chooses_among_the_librarys_rewrites_only_when_offered(replay_of, kb):
    """A gap in the library is not a technique failure: with `offered`, every step the loop
    takes has a rewrite, and nothing is recorded as an error."""
    replay = replay_of("matmul")
    assert replay.offered(replay.naive_text) == {
        "tune_block_size",
        "shared_memory_tiling",
        "tensor_cores_wmma",
    }
    outcome = run(replay, kb, rollouts=3, depth=3, temperature=1.0, offered=True)
    assert outcome.steps and all(s.target is not None for s in replay.steps)
    assert all(a.outcome != "error" for a in kb.attempts())


def test_a_kept_step_is_credited_with_the_discounted_best_it_enabled(replay_of, kb):
    """matmul: tiling (3.5 -> 2.1 ms) kept, then register tiles on it (-> 0.9 ms): tiling's
    KB row carries the chained 3.9x, discounted, not only its own 1.67x."""
    replay = replay_of("matmul")
    outcome = run(
        replay, kb, technique="shared_memory_tiling", depth=2, temperature=0.0, offered=True
    )
    tiling = outcome.steps[0]
    assert [s.target for s in replay.steps] == ["smem_tiled", "reg_tiled"]
    own = 3.5 / replay.steps[0].time_ms
    chained = 3.5 / replay.steps[1].time_ms
    assert tiling.measured_speedup == pytest.approx(credited_speedup(own, chained), rel=0.08)
    assert tiling.measured_speedup > own * 1.5 and "credited" in tiling.detail
    (row,) = [a for a in kb.attempts() if a.technique == "shared_memory_tiling"]
    assert row.measured_speedup == pytest.approx(tiling.measured_speedup)


def test_credit_discounts_a_chained_gain_and_never_softens_a_loss():
    assert credited_speedup(1.5, 4.0) == pytest.approx(4.0**CHAIN_DISCOUNT)
    assert credited_speedup(3.0, 3.1) == 3.0  # its own gain is larger than the discounted chain
    assert credited_speedup(0.8, 0.8) == 0.8  # led nowhere: its own (slower) speedup
    assert credited_speedup(0.8, 0.9) == 0.9 < MIN_SPEEDUP
