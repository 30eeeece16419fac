"""bench/project_kernelbench.py: KernelBench's projected wall time is computed from the
measured results file by its stated formula, and rewrites only docs/kernelbench.md's block."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "project_kernelbench.py"
MEASURED = {
    "device": "NVIDIA H100 80GB HBM3",
    "per_candidate_overhead_p50_s": 5.0,
    "per_problem_fixed_s": 20.0,
    "by_level": {"level2": {"per_candidate_overhead_p50_s": 6.0, "per_problem_fixed_s": 30.0}},
    "llm_overlap_ratio": 1.2,
    "rollouts_scaling": {"2": 2.0, "4": 4.0},
}


@pytest.fixture(scope="module")
def script() -> dict:
    return runpy.run_path(str(SCRIPT), run_name="project_kernelbench")


def test_hours_follow_the_stated_formula_from_the_measured_numbers(script):
    rows = script["projection"](MEASURED, llm_call_s=10.0)
    level1, level2 = rows["level1"]["hours"], rows["level2"]["hours"]
    # 100 problems x (20 s fixed + 100 candidates x 5 s / scaling)
    assert level1["1"]["without_llm"] == pytest.approx(100 * (20 + 500) / 3600)
    assert level1["4"]["without_llm"] == pytest.approx(100 * (20 + 125) / 3600)
    # with the LLM: each rollout's 10 steps of 2 calls x 10 s + its candidate, or the GPUs' share
    assert level1["1"]["with_llm"] == pytest.approx(100 * (20 + 20 + max(10 * 25, 500)) / 3600)
    assert level1["4"]["with_llm"] == pytest.approx(100 * (20 + 20 + 10 * 25) / 3600)
    # level 2 takes its own measurements
    assert level2["1"]["without_llm"] == pytest.approx(100 * (30 + 600) / 3600)


def test_unmeasured_scaling_leaves_those_gpu_counts_out(script):
    single = {k: v for k, v in MEASURED.items() if k != "rollouts_scaling"}
    assert set(script["projection"](single)["level1"]["hours"]) == {"1"}
    assert "scaling not measured yet" in script["markdown"]("H100", single, "x.json")


def test_the_page_block_is_replaced_and_nothing_else(script):
    text = (
        "before\n<!-- kernelbench-projection:begin -->\nold\n"
        "<!-- kernelbench-projection:end -->\nafter\n"
    )
    rewritten = script["with_table"](text, script["markdown"]("H100", MEASURED, "x.json"))
    assert rewritten.startswith("before\n") and rewritten.endswith("end -->\nafter\n")
    assert "old" not in rewritten and "| level2 | 6.0 s | 30.0 s |" in rewritten
    # level 1 has no numbers of its own there: the row says it borrows them
    assert "| level1 (none measured: the other level's) | 5.0 s | 20.0 s |" in rewritten
    with pytest.raises(ValueError, match="no kernelbench-projection block"):
        script["with_table"]("no block here", "table")
