"""A new user's search through the real loop in replay (the fixture table, an empty SQLite KB,
OptimizeRequest's default selection): rollouts that come back to the original kernel branch
to what was not tried there, and a kernel whose every technique failed ends its rollout
instead of spending steps on the same failure."""

from __future__ import annotations

from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.settings import Settings

DEFAULTS = OptimizeRequest(source="", source_text="", kernel="")


def optimize(replay, kb, **fields):
    """The product's optimize on `replay`'s naive kernel, with its default selection unless
    `fields` say otherwise; the loop chooses among the library's rewrites. What each step
    started from, tried, and reached."""
    outcome = replay.optimize(kb, replay.request(seed=1, settings=Settings(), **fields))
    assert outcome.error is None, outcome.error
    return [(s.source, s.technique, s.target) for s in replay.steps]


def test_a_second_rollout_branches_to_what_the_first_left_untried(replay_of, kb):
    """row_sum's naive kernel offers coalescing (the prior's first choice) and more
    parallelism. The first rollout coalesces and vectorizes; the second, back at the naive
    kernel with coalescing measured there, tries more parallelism instead of coalescing
    again. Without exploration it walks the known branch again."""
    assert DEFAULTS.temperature == 0.0 and DEFAULTS.exploration > 0
    steps = optimize(replay_of("row_sum"), kb, rollouts=2, depth=2)
    assert steps[:2] == [
        ("naive", "coalesce_global_access", "warp_row"),
        ("warp_row", "vectorized_loads", "warp_row_vec4"),
    ]
    assert steps[2] == ("naive", "increase_parallelism", "warp_row")


def test_without_exploration_the_second_rollout_repeats_the_first(replay_of, tmp_path):
    from kernelblaster.kb.store import KnowledgeBase

    with KnowledgeBase.open(tmp_path / "greedy.sqlite3") as kb:
        steps = optimize(replay_of("row_sum"), kb, rollouts=2, depth=2, exploration=0.0)
    assert steps[2] == ("naive", "coalesce_global_access", "warp_row")


def test_a_dead_end_sends_the_rollout_back_along_its_branch(replay_of, kb):
    """softmax: block_row_shfl's only rewrite in the library computes the wrong thing. Once it
    failed there, that kernel has nothing left to try; nor has block_row, whose one other
    rewrite led to it. The rollout goes back along its branch with the step it has left (to
    the original, which still has more parallelism to try) instead of ending, and tries the
    failure only once."""
    steps = optimize(replay_of("softmax"), kb, rollouts=1, depth=4)
    assert steps == [
        ("naive", "coalesce_global_access", "block_row"),
        ("block_row", "warp_shuffle_reduction", "block_row_shfl"),
        ("block_row_shfl", "algebraic_simplification", "online_shfl_wrong"),
        ("naive", "increase_parallelism", "block_row"),
    ]
    attempts = kb.attempts()
    assert len(attempts) == 4
    assert [a.outcome for a in attempts if a.technique == "algebraic_simplification"] == [
        "wrong_result"
    ]
    # the kept steps of the branch that ended are credited with what they reached
    kept = {a.technique: a for a in attempts}
    assert kept["coalesce_global_access"].outcome == "success"
    assert kept["warp_shuffle_reduction"].outcome == "success"


def test_a_success_that_led_to_a_dead_end_is_not_walked_again(replay_of, kb):
    """After the first rollout every branch of softmax's naive kernel ends at a kernel with
    nothing left to try: re-applying coalescing or more parallelism would only re-derive
    block_row. The second rollout takes no step instead of walking the known branch again."""
    steps = optimize(replay_of("softmax"), kb, rollouts=2, depth=4)
    assert len(steps) == 4
    assert steps[-1] == ("naive", "increase_parallelism", "block_row")


def test_back_at_the_original_the_search_tries_what_may_beat_the_fastest_kernel_found(
    replay_of, kb
):
    """A KB that optimized softmax, then layernorm with three rollouts of two steps: the first
    two rollouts take the branch softmax taught (coalescing, then warp shuffles, the fastest
    kernel found). Coming back to the original a third time, re-walking to that kernel can add
    nothing: the search tries more parallelism, whose outcome there is unknown, instead. Were
    the original not known to be behind the fastest kernel found, coalescing's measured gain
    would lead again and the third rollout would re-walk it."""
    optimize(replay_of("softmax"), kb)
    steps = optimize(replay_of("layernorm"), kb, rollouts=3, depth=2)
    known = [
        ("naive", "coalesce_global_access", "block_row"),
        ("block_row", "warp_shuffle_reduction", "block_row_shfl"),
    ]
    assert steps[:4] == known * 2
    assert steps[4] == ("naive", "increase_parallelism", "block_row")
