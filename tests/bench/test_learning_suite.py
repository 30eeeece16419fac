"""bench/learning_suite.py on the fixture table (invented numbers,
tests/agents/replay/fixture_table.py): the what-if fills in what the table does not measure from the
manifests' predictions, leaves out what it can't predict and says why, and the per-task analysis
says what the fresh arm did, what the oracle reaches and the room between them."""

from __future__ import annotations

import math
import shutil

import pytest

from bench import learning
from bench import learning_suite as suite
from kernelblaster.agents.replay.table import NAIVE, LibraryError, load_task
from tests.agents.replay.fixture_table import LIBRARY


def test_a_task_the_table_lacks_is_predicted_from_the_kernels_its_manifest_names(library, table):
    predicted, left_out = suite.what_if_table(library, table)
    gelu_naive = table.measurement("gelu", NAIVE)
    gelu_vec4 = table.measurement("gelu", "vec4")
    # silu: naive like gelu/naive, vec4 like gelu/vec4 (its speedup), coarse4 at 1.0x
    naive = predicted.measurement("silu", NAIVE)
    vec4 = predicted.measurement("silu", "vec4")
    assert "silu" not in left_out
    assert naive.time_ms == pytest.approx(gelu_naive.time_ms)
    assert naive.time_ms / vec4.time_ms == pytest.approx(gelu_naive.time_ms / gelu_vec4.time_ms)
    assert vec4.state == gelu_vec4.state and vec4.detail == "predicted like gelu/vec4"
    assert predicted.measurement("silu", "coarse4").time_ms == pytest.approx(naive.time_ms)
    assert predicted.measurement("silu", "coarse4_vec4_notail").outcome == "wrong"
    assert predicted.measurement("silu", "vec4_ldg").outcome == "build_error"
    edges = {(e.source, e.technique): e for e in predicted.transitions if e.task == "silu"}
    assert edges[(NAIVE, "vectorized_loads")].outcome == "success"
    assert edges[(NAIVE, "thread_coarsening")].outcome == "regression"
    # what the table measures stays as measured
    assert predicted.measurement("gelu", "vec4") == gelu_vec4
    # linear_gelu's predictions name linear_relu's kernels, which the fixture does not measure
    assert "linear_relu/naive" in left_out["linear_gelu"]
    assert not any(e.task == "linear_gelu" for e in predicted.transitions)


def test_shrink_takes_the_predicted_gains_to_a_power(library, table):
    full, _ = suite.what_if_table(library, table)
    half, _ = suite.what_if_table(library, table, shrink=0.5)
    gain = full.measurement("silu", NAIVE).time_ms / full.measurement("silu", "vec4").time_ms
    shrunk = half.measurement("silu", NAIVE).time_ms / half.measurement("silu", "vec4").time_ms
    assert shrunk == pytest.approx(math.sqrt(gain))


def test_a_prediction_that_names_no_kernel_is_refused(tmp_path):
    task = tmp_path / "silu"
    shutil.copytree(LIBRARY / "silu", task)
    manifest = task / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('like = "gelu/vec4"', 'like = "vec4"'))
    with pytest.raises(LibraryError, match='vec4\'s prediction needs like = "task/variant"'):
        load_task(manifest)


def test_the_analysis_says_what_the_fresh_arm_did_against_the_oracle(library, table):
    config = learning.Config(tables=["fixture"], ceiling_seeds=1)
    result = suite.run(table, library, config, what_if=True, shrink=1.0)
    assert {"gelu", "silu", "softmax"} <= set(result["tasks"])
    assert "linear_gelu" in result["left_out"]
    by_task = {r["task"]: r for r in result["per_task"]}
    for record in by_task.values():
        for budget in ("1", "2", "4"):
            assert record["oracle"][budget] >= record["fresh"][budget] - 1e-9
            ratio = record["oracle"][budget] / record["fresh"][budget]
            assert record["room"][budget] == pytest.approx(ratio, abs=1e-3)
    silu = by_task["silu"]
    # the prior ranks the fixture's gelu-like state's techniques; the fresh arm's first step is
    # the first of them the library offers, and the table says what it measured
    first = silu["prior_at_naive"][0]
    assert silu["fresh_steps"][0]["technique"] == first["technique"]
    assert silu["fresh_steps"][0]["to"] == first["to"]
    assert result["gate"]["passes"] == (result["ceiling_leave_one_out"]["2"] >= 1.3)
    assert "gate: leave-one-out at 2" in suite.markdown(result)
