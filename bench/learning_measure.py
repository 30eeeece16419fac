"""Measure every kernel of the learning library once with the real harness, into the replay table.

    python -m bench.learning_measure                 # resumes; stops before --budget-s runs out
    python -m bench.learning_measure --tasks softmax,matmul --out /tmp/table.json  # in that order
    python -m bench.learning_measure --gpus 0,1,2,3  # four H100s of one host

Each kernel is built, verified, timed, profiled (ncu quick) and classified as a save is; builds
run first in parallel, then GPU work one kernel at a time per GPU. The table,
bench/results/learning-table-<gpu>.json, is rewritten atomically after every kernel, and a rerun
skips what was measured from the same source. Needs a GPU with ncu access."""

from __future__ import annotations

import argparse
import contextvars
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

from bench.common import RESULTS, device_name, host_gpu_models, slug
from kernelblaster.agents.loop.plan import MIN_SPEEDUP
from kernelblaster.agents.replay.table import (
    NAIVE,
    LearningTable,
    Measurement,
    Task,
    load_library,
    read_table,
    source_digest,
    spread_from_quantiles,
    transitions,
    write_table,
)
from kernelblaster.harness.protocol.worker_client import keep_spare_workers, run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import Settings

LIBRARY = Path(__file__).resolve().parent / "learning" / "tasks"
DETAIL_CHARS = 600
# Harness error kinds a variant causes itself -> its outcome; any other kind (no GPU, ncu
# permissions, a missing tool) is the machine's problem and stops the run.
VARIANT_ERRORS = {
    "build_failed": "build_error",
    "entry_missing": "build_error",
    "shape_mismatch": "wrong",
    "illegal_memory_access": "crash",
    "crash": "crash",
    "timeout": "timeout",
}


class MachineProblem(Exception):
    """The harness could not measure anything here; the message says what and how to fix it."""


def _request(task: Task, variant: str, kind: str, settings: Settings) -> WorkerRequest:
    return WorkerRequest(
        task=kind,  # type: ignore[arg-type]
        source=str(task.source_path(variant)),
        reference=str(task.reference),
        settings=settings,
        depth="quick",
    )


def _build_log(response: WorkerResponse) -> str:
    build = response.build
    if build is None:
        return ""
    lines = [f"line {d.line}: {d.message}" for d in build.diagnostics if d.severity == "error"]
    return "\n".join(lines)[:DETAIL_CHARS]


def measure(task: Task, variant: str, response: WorkerResponse, seconds: float) -> Measurement:
    """The table's record of one worker response (or MachineProblem)."""
    text = task.source_text(variant)
    entry = Measurement(
        task=task.task,
        variant=variant,
        source_sha256=source_digest(text),
        reference_sha256=source_digest(task.reference.read_text()),
        outcome="verified",
        seconds=round(seconds, 2),
    )
    check = response.check
    if response.build is not None and not response.build.ok:
        entry.outcome, entry.detail = "build_error", _build_log(response)
        return entry
    if check is not None and check.verify is not None and not check.verify.ok:
        entry.outcome, entry.detail = "wrong", check.verify.message[:DETAIL_CHARS]
        return entry
    error = response.error
    if error is not None:
        outcome = VARIANT_ERRORS.get(error.kind)
        if outcome is None:
            raise MachineProblem(f"{error.kind}: {error.message} {error.fix}".strip())
        entry.outcome = outcome  # type: ignore[assignment]
        entry.detail = f"{error.message}\n{error.log}".strip()[:DETAIL_CHARS]
        return entry
    profile = response.profile
    if check is None or check.timing is None or profile is None or not profile.kernels:
        raise MachineProblem(f"{task.task}/{variant}: verified but not timed and profiled")
    timing = check.timing
    entry.time_ms, entry.p20_ms, entry.p80_ms = timing.median_ms, timing.p20_ms, timing.p80_ms
    entry.repetitions = timing.repetitions
    entry.spread = spread_from_quantiles(timing.p20_ms, timing.p80_ms)
    entry.detail = check.verify.message if check.verify else ""
    entry.eager_ms = check.eager.median_ms if check.eager else None
    entry.compile_ms = check.compiled.median_ms if check.compiled else None
    entry.kernel_ns = {k.name: k.duration_ns or 0.0 for k in profile.kernels}
    launches = zip(profile.kernels, response.states, strict=True)
    entry.state = max(launches, key=lambda launch: launch[0].duration_ns or 0.0)[1]
    return entry


def pending(tasks: list[Task], table: LearningTable) -> list[tuple[Task, str]]:
    """Kernels without a measurement of their current source against their task's current
    reference; each task's naive kernel first."""
    return [
        (task, variant)
        for task in tasks
        for variant in [NAIVE, *(v.name for v in task.variant)]
        if table.current(task, variant) is None
    ]


def record(table: LearningTable, tasks: list[Task], entry: Measurement, out: Path) -> None:
    table.measurements = [
        m for m in table.measurements if (m.task, m.variant) != (entry.task, entry.variant)
    ]
    table.measurements.append(entry)
    table.transitions = transitions(tasks, table)
    write_table(out, table)


def _expected(task: Task, variant: str) -> str:
    found = next((v for v in task.variant if v.name == variant), None)
    return (
        "verified" if found is None or found.expect in ("success", "regression") else found.expect
    )


def chosen(tasks: list[Task], wanted: list[str]) -> list[Task]:
    """The `wanted` tasks, in the order given: a budget that runs out leaves the last named,
    not the library's last. ValueError names a task the library lacks."""
    if unknown := set(wanted) - {t.task for t in tasks}:
        raise ValueError(f"unknown task(s) {sorted(unknown)}")
    return sorted((t for t in tasks if t.task in wanted), key=lambda t: wanted.index(t.task))


class _Measuring:
    """The GPU phase of a run: kernels handed out in order to one thread per GPU, each kernel
    recorded (and the table rewritten) as it ends, under one lock."""

    def __init__(self, tasks: list[Task], table: LearningTable, out: Path, deadline: float):
        self.tasks, self.table, self.out, self.deadline = tasks, table, out, deadline
        self.lock = threading.Lock()
        self.per_kernel: list[float] = []
        self.surprises: list[str] = []  # outcomes their author did not expect: review them
        self.measured = 0
        self.problem: str | None = None  # a MachineProblem's message: every thread stops

    def next_fits(self) -> bool:
        """Whether another kernel fits before the deadline (the last ones' seconds as a guide)."""
        expected = max(self.per_kernel[-5:], default=15.0)
        return self.problem is None and time.monotonic() + expected <= self.deadline

    def done(self, task: Task, variant: str, entry: Measurement) -> None:
        with self.lock:
            if entry.state is not None:
                self.table.arch = self.table.arch or entry.state.arch
            record(self.table, self.tasks, entry, self.out)
            self.per_kernel.append(entry.seconds)
            self.measured += 1
            meant = _expected(task, variant)
            surprise = "" if entry.outcome == meant else "  (NOT as expected)"
            if surprise:
                self.surprises.append(f"{task.task}/{variant}: {entry.outcome}, expected {meant}")
            timing = f" {entry.time_ms:.4f} ms ±{entry.spread:.1%}" if entry.time_ms else ""
            state = f" [{entry.state.state}]" if entry.state else ""
            print(
                f"{task.task}/{variant}: {entry.outcome}{timing}{state} in {entry.seconds:.1f} s"
                f"{surprise}",
                flush=True,
            )


Run = Callable[[WorkerRequest, Settings], WorkerResponse]


def measure_all(
    todo: list[tuple[Task, str]],
    builds: list[WorkerResponse],
    measuring: _Measuring,
    settings: Settings,
    gpus: list[int],
    run: Run = run_harness_sync,
) -> None:
    """Profile each built kernel of `todo` on one of `gpus` (its build's failure recorded as
    it is), in order, one thread per GPU; each thread's requests run in the spare workers
    kept around the call (`keep_spare_workers`), which its own copy of the context sees."""
    queue = list(zip(todo, builds, strict=True))
    queue.reverse()  # popped from the end: in order

    def on_gpu(gpu: int) -> None:
        on_this = msgspec.structs.replace(settings, gpu_index=gpu)
        while True:
            with measuring.lock:
                if not queue or not measuring.next_fits():
                    return
                (task, variant), built = queue.pop()
            started = time.monotonic()
            if built.build is not None and not built.build.ok:
                response = built
            else:
                response = run(_request(task, variant, "profile", on_this), on_this)
            try:
                entry = measure(task, variant, response, time.monotonic() - started)
            except MachineProblem as exc:
                measuring.problem = str(exc)
                return
            measuring.done(task, variant, entry)

    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(on_gpu, gpu)) for gpu in gpus
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")
    parser.add_argument("--out", type=Path, help="table JSON (default: under bench/results/)")
    parser.add_argument(
        "--budget-s", type=float, default=480.0, help="stop before starting a kernel past this"
    )
    parser.add_argument("--jobs", type=int, default=8, help="parallel builds")
    parser.add_argument(
        "--gpus",
        default="0",
        help="comma-separated GPU indices, one kernel at a time on each (same model: the "
        "table is named after the first)",
    )
    args = parser.parse_args(argv)
    began = time.monotonic()
    tasks = load_library(LIBRARY)
    if args.tasks:
        try:
            tasks = chosen(tasks, args.tasks.split(","))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    gpus = [int(gpu) for gpu in args.gpus.split(",")]
    if len(gpus) > 1 and len(models := host_gpu_models()) > 1:
        print(f"error: --gpus on a host of several models ({', '.join(sorted(models))}): "
              "one table is one model's; name GPUs of one", file=sys.stderr)  # fmt: skip
        return 2
    device = device_name()
    out = args.out or RESULTS / f"learning-table-{slug(device)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    table = (
        read_table(out)
        if out.is_file()
        else LearningTable(device=device, arch="", min_speedup=MIN_SPEEDUP)
    )
    settings = Settings()
    todo = pending(tasks, table)
    print(f"{len(todo)} kernel(s) to measure on {device} x{len(gpus)} -> {out}", flush=True)

    def build(item: tuple[Task, str]) -> WorkerResponse:
        return run_harness_sync(_request(*item, "build", settings), settings)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        builds = list(pool.map(build, todo))
    measuring = _Measuring(tasks, table, out, began + args.budget_s)
    # Each kernel's worker prewarmed while the one before it ran (its torch import, its CUDA
    # context, and its reference side when it is the same task's): seconds per kernel.
    with keep_spare_workers():
        measure_all(todo, builds, measuring, settings, gpus)
    if measuring.problem is not None:
        print(f"error: {measuring.problem}", file=sys.stderr)
        return 1
    left = len(todo) - measuring.measured
    for line in measuring.surprises:
        print(f"NOT as expected: {line}")
    print(
        f"measured {measuring.measured}, {left} left"
        + (": run again to continue" if left else "; table complete")
        + f" ({time.monotonic() - began:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
