"""bench/learning_measure.py: what a harness response becomes in the table (real worker runs:
nvcc here; the whole table on a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from bench import learning_measure as measure
from kernelblaster.agents.replay.table import NAIVE, LearningTable, read_table
from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import Settings
from tests.tests_paths import REPO


def _worker(task, variant, kind, settings):
    request = WorkerRequest(
        task=kind,
        source=str(task.source_path(variant)),
        reference=str(task.reference),
        settings=settings,
    )
    return run_harness_sync(request, settings)


@pytest.mark.nvcc
def test_a_build_failure_is_recorded_with_the_compilers_words(library):
    gelu = next(t for t in library if t.task == "gelu")
    response = _worker(gelu, "vec4_ldg", "build", Settings(arch="sm_90"))
    entry = measure.measure(gelu, "vec4_ldg", response, 1.0)
    assert entry.outcome == "build_error" and entry.time_ms is None
    assert 'cannot be used to initialize an entity of type "const float4' in entry.detail


@pytest.mark.nvcc
def test_a_machine_that_cannot_run_kernels_stops_the_run(library, tmp_path):
    gelu = next(t for t in library if t.task == "gelu")
    response = _worker(gelu, NAIVE, "profile", Settings(arch="sm_90", cache_dir=str(tmp_path)))
    if response.profile is not None:
        pytest.skip("this machine can run kernels")
    assert response.error is not None and response.error.kind in (
        "torch_missing",
        "no_gpu",
        "no_driver",
    )
    with pytest.raises(measure.MachineProblem):
        measure.measure(gelu, NAIVE, response, 1.0)


def test_pending_skips_what_the_table_has_from_the_same_source(library, table):
    todo = measure.pending(library, table)
    fixture_tasks = {m.task for m in table.measurements}
    assert not any(task.task in fixture_tasks for task, _ in todo)
    transpose = [variant for task, variant in todo if task.task == "transpose"]
    assert transpose[0] == NAIVE and len(transpose) == 7
    changed = msgspec.structs.replace(table, measurements=list(table.measurements))
    first = changed.measurements[0]
    changed.measurements[0] = msgspec.structs.replace(first, source_sha256="stale")
    assert (first.task, first.variant) in {
        (t.task, v) for t, v in measure.pending(library, changed)
    }


def test_a_changed_reference_measures_its_tasks_kernels_again(library, table):
    """A variant's outcome depends on the reference it is checked against (conv1x1's first
    reference ran in cuDNN's TF32 and made every exact fp32 kernel "wrong"): an entry measured
    against another reference text is measured again; one that recorded none is kept."""
    by_task = {task.task: task for task in library}
    entries = [
        msgspec.structs.replace(
            m, reference_sha256=measure.source_digest(by_task[m.task].reference.read_text())
        )
        for m in table.measurements
    ]
    current = msgspec.structs.replace(table, measurements=entries)
    assert not {(m.task, m.variant) for m in entries} & {
        (t.task, v) for t, v in measure.pending(library, current)
    }
    first = entries[0]
    stale = msgspec.structs.replace(
        current, measurements=[msgspec.structs.replace(first, reference_sha256="old"), *entries[1:]]
    )
    assert (first.task, first.variant) in {(t.task, v) for t, v in measure.pending(library, stale)}
    unrecorded = msgspec.structs.replace(
        current, measurements=[msgspec.structs.replace(first, reference_sha256=None), *entries[1:]]
    )
    assert (first.task, first.variant) not in {
        (t.task, v) for t, v in measure.pending(library, unrecorded)
    }


@pytest.mark.gpu
def test_measuring_a_task_on_the_gpu_gives_the_expected_outcomes(library, tmp_path):
    out = tmp_path / "table.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "bench.learning_measure",
            "--tasks", "gelu", "--out", str(out),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    print(done.stdout, done.stderr)
    assert done.returncode == 0
    table = read_table(out)
    gelu = next(t for t in library if t.task == "gelu")
    measured = {m.variant: m for m in table.measurements}
    assert measured[NAIVE].outcome == "verified" and measured[NAIVE].state is not None
    for variant in gelu.variant:
        expected = "verified" if variant.expect in ("success", "regression") else variant.expect
        assert measured[variant.name].outcome == expected, variant.name
    assert len(table.transitions) == len(gelu.edges())
    assert json.loads(out.read_text())["format"] == "kernelblaster-learning-table"


def test_the_tasks_asked_for_are_measured_in_the_order_given(library):
    """A budget that runs out leaves the last task named, not the library's last in its own
    (alphabetical) order: an H200 run asked for row_sumsq_long first and measured the linear
    tasks instead."""
    names = [t.task for t in measure.chosen(library, ["row_sumsq_long", "linear_bias", "gelu"])]
    assert names == ["row_sumsq_long", "linear_bias", "gelu"]
    with pytest.raises(ValueError, match="no_such_task"):
        measure.chosen(library, ["gelu", "no_such_task"])


def _crashing_on(seen: list[tuple[int, str]], kind: str = "crash"):
    """A `run` for measure_all that notes which GPU each kernel went to and answers with a
    harness error of `kind` (a crash is the variant's outcome; no_gpu stops the run)."""

    def run(request, settings):
        seen.append((settings.gpu, Path(request.source).name))
        time.sleep(0.01)
        return WorkerResponse(error=HarnessError(kind=kind, message=f"{kind} for the test"))

    return run


def test_kernels_are_shared_out_over_the_gpus_named_and_each_recorded_once(library, tmp_path):
    tasks = measure.chosen(library, ["gelu", "transpose"])
    todo = measure.pending(tasks, LearningTable(device="test", arch="", min_speedup=1.1))
    out = tmp_path / "table.json"
    measuring = measure._Measuring(
        tasks, LearningTable(device="test", arch="", min_speedup=1.1), out, time.monotonic() + 600
    )
    seen: list[tuple[int, str]] = []
    builds = [WorkerResponse() for _ in todo]
    measure.measure_all(todo, builds, measuring, Settings(), [0, 1], run=_crashing_on(seen))
    assert measuring.measured == len(todo) and measuring.problem is None
    assert {gpu for gpu, _ in seen} == {0, 1}  # both took kernels
    assert sorted(name for _, name in seen) == sorted(
        Path(task.source_path(variant)).name for task, variant in todo
    )
    written = read_table(out)
    assert sorted((m.task, m.variant) for m in written.measurements) == sorted(
        (task.task, variant) for task, variant in todo
    )
    assert {m.outcome for m in written.measurements} == {"crash"}


def test_a_machine_problem_on_one_gpu_stops_every_gpu(library, tmp_path):
    tasks = measure.chosen(library, ["gelu", "transpose"])
    todo = measure.pending(tasks, LearningTable(device="test", arch="", min_speedup=1.1))
    measuring = measure._Measuring(
        tasks,
        LearningTable(device="test", arch="", min_speedup=1.1),
        tmp_path / "table.json",
        time.monotonic() + 600,
    )
    seen: list[tuple[int, str]] = []
    builds = [WorkerResponse() for _ in todo]
    run = _crashing_on(seen, "no_gpu")
    measure.measure_all(todo, builds, measuring, Settings(), [0, 1], run=run)
    assert measuring.problem is not None and "no_gpu" in measuring.problem
    assert measuring.measured == 0 and len(seen) <= 2  # one kernel per GPU at most
