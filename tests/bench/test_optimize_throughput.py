"""bench/optimize_throughput.py's scaling figures: each GPU count's speedup over the 1-GPU run,
and the bound that ncu's host-serial passes put on it, from the runs' summaries."""

from __future__ import annotations

import pytest

from bench.optimize_throughput import scaling_figures

WORKLOAD = {"rollouts": 4, "depth": 4, "llm_delay_s": 2.0, "gpus": [0, 1, 2, 3]}


def summary(rollouts_wall_s: float, wall_s: float, ncu_share: float | None) -> dict:
    return {"rollouts_wall_s": rollouts_wall_s, "wall_s": wall_s, "ncu_share": ncu_share}


def test_scaling_is_the_one_gpu_wall_over_each_count_s():
    runs = {
        "1": summary(100.0, 130.0, 0.2),
        "2": summary(55.0, 85.0, 0.35),
        "4": summary(32.0, 62.0, 0.6),
    }
    figures = scaling_figures(runs, WORKLOAD)
    assert figures["rollouts_scaling"] == {"2": pytest.approx(1.818, abs=1e-3), "4": 3.125}
    assert figures["whole_run_scaling"] == {"2": 1.529, "4": 2.097}
    # a fifth of the 1-GPU rollouts' wall in ncu: at most 1/(0.2+0.8/2) and 1/(0.2+0.8/4)
    assert figures["serial_bound"] == {"2": 1.667, "4": 2.5}
    assert figures["scaling"] == {**WORKLOAD, "runs": runs}


def test_a_one_gpu_baseline_has_no_scaling_yet_but_its_bound():
    figures = scaling_figures({"1": summary(100.0, 130.0, 0.0)}, {**WORKLOAD, "gpus": [0]})
    assert figures["rollouts_scaling"] == {} and figures["whole_run_scaling"] == {}
    assert figures["serial_bound"] == {"2": 2.0, "4": 4.0}


def test_without_a_rollouts_wall_there_is_no_bound():
    figures = scaling_figures({"1": summary(0.0, 5.0, None)}, WORKLOAD)
    assert figures["serial_bound"] == {}
