"""On a GPU: torch.compile's compilation ahead (harness/check/baselines.py: compile_ahead)
launches no kernel and no copy on the device, so it may run while a candidate is timed there;
the measurement after it finds its graph compiled; and a baselines job through the real worker
(task "baselines") measures both baselines, its compilation and its GPU turn apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernelblaster.agents.kernelbench.baselines import BaselinesJob
from kernelblaster.agents.loop.gpu_gates import GpuGates
from kernelblaster.harness.check.baselines import compile_ahead, measure_baselines
from kernelblaster.harness.check.timing import timing_input_sets
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.settings import Settings

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[3]
RELU = REPO / "bench" / "kernelbench" / "level1" / "19_ReLU.py"
GEMM = REPO / "bench" / "kernelbench" / "level2" / "12_Gemm_Multiply_LeakyReLU.py"


@pytest.mark.parametrize("reference", [RELU, GEMM], ids=lambda p: p.stem)
def test_compiling_ahead_launches_nothing_on_the_gpu_and_the_measurement_reuses_it(
    tmp_path, reference
):
    from torch._dynamo.utils import counters

    device = torch.device("cuda", 0)
    torch.empty(1, device=device)  # the context, before the profiler watches
    torch.cuda.synchronize(device)
    loaded = load_reference(reference, torch.device("cpu"))
    with profile(activities=[ProfilerActivity.CUDA]) as watched:
        compile_ahead(loaded, 7, device)
        torch.cuda.synchronize(device)
    on_the_gpu = [e.name for e in watched.events() if e.device_type.name == "CUDA"]
    assert on_the_gpu == [], f"compile_ahead ran on the GPU: {on_the_gpu[:10]}"
    hits = counters["inductor"]["fxgraph_cache_hit"]
    timed = load_reference(reference, device)
    measured = measure_baselines(timed, timing_input_sets(timed, [7], device), device, tmp_path)
    assert measured.compiled is not None and measured.compile_error is None
    assert counters["inductor"]["fxgraph_cache_hit"] > hits
    print(f"{reference.stem}: {measured.seconds}")  # the compile on the GPU turn, for the log


def test_a_baselines_job_measures_both_through_the_real_worker(tmp_path):
    job = BaselinesJob(RELU, RELU.with_suffix(".cu"), Settings(cache_dir=str(tmp_path)), GpuGates())
    measured, error = job.join()
    assert error is None, error
    assert measured is not None and measured.eager is not None and measured.compiled is not None
    assert measured.gpu is not None and "NVIDIA" in measured.gpu
    assert {span.kind for span in job.phases.spans} == {"cpu", "gpu"}
    parts = job.phases.parts
    assert parts["baselines_compile_ahead"] > 0 and "baselines_compile" in parts
    print(f"job phases: {job.phases}")
