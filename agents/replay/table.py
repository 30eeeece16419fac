"""The optimization environment the loop can replay: tasks, each a naive kernel with candidate
rewrites (`manifest.toml` names each variant's edge: its source variant and technique), and the
table of what every candidate measured on a GPU (bench/learning_measure.py): a `Measurement` per
variant and a `Transition` per edge."""

from __future__ import annotations

import hashlib
import math
import tomllib
from pathlib import Path
from typing import Final, Literal

import msgspec

from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.kb.catalog import load_catalog

NAIVE = "naive"
TABLE_FORMAT: Final = "kernelblaster-learning-table"

VariantOutcome = Literal["verified", "build_error", "wrong", "crash", "timeout"]
TransitionOutcome = Literal["success", "regression", "build_error", "wrong", "crash", "timeout"]
Expectation = Literal["success", "regression", "build_error", "wrong"]


class LibraryError(ValueError):
    """A task manifest or table that can't be used; the message names the file and the entry."""


class Edge(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename={"source": "from"}):
    source: str  # the variant rewritten ("naive" or a variant name); `from` in the manifest
    technique: str  # a catalog technique id


class Prediction(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a kernel's author expects it to measure as before a GPU has measured it, for the
    suite's what-if (bench/learning_suite.py): never used once the table measures it."""

    # "task/variant": a measured kernel whose state (bottleneck, findings, roof) this one is
    # expected to share: the same access pattern and bottleneck, e.g. a twin in another task
    like: str
    # expected time of the task's naive kernel / this kernel's; None: the `like` kernel's own
    # speedup over its task's naive kernel (1 for a naive kernel)
    speedup: float | None = None


class Variant(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    file: str  # relative to the task folder
    expect: Expectation  # what its author expects it to measure as (the table says what it did)
    why: str
    reached_by: list[Edge]
    predicted: Prediction | None = None  # for a variant expected to verify


FAMILIES = ("reduction", "elementwise", "gemm", "layout", "stencil")


class Task(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    task: str
    family: str  # one of FAMILIES: kernels of a family share states, findings and fixes
    category: str
    naive: str  # the naive kernel, `<task>.cu`, with `<task>.py` beside it
    description: str
    variant: list[Variant]
    predicted: Prediction | None = None  # the naive kernel's
    folder: str = ""  # set on loading: the task's folder

    def source_path(self, variant: str) -> Path:
        if variant == NAIVE:
            return Path(self.folder) / self.naive
        return Path(self.folder) / next(v.file for v in self.variant if v.name == variant)

    def source_text(self, variant: str) -> str:
        return self.source_path(variant).read_text("utf-8")

    @property
    def reference(self) -> Path:
        return (Path(self.folder) / self.naive).with_suffix(".py")

    def prediction(self, variant: str) -> Prediction | None:
        if variant == NAIVE:
            return self.predicted
        return next(v.predicted for v in self.variant if v.name == variant)

    def edges(self) -> list[tuple[str, str, str]]:
        """(from, technique, to) for every edge of the task."""
        return [(e.source, e.technique, v.name) for v in self.variant for e in v.reached_by]


def load_task(manifest: Path) -> Task:
    try:
        task = msgspec.convert(tomllib.loads(manifest.read_text("utf-8")), Task)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise LibraryError(f"{manifest}: {exc}") from exc
    task.folder = str(manifest.parent.resolve())
    _validate(task, manifest)
    return task


def load_library(root: Path) -> list[Task]:
    """Every task under `root` (one folder each), sorted by name."""
    manifests = sorted(root.glob("*/manifest.toml"))
    if not manifests:
        raise LibraryError(f"{root} holds no task (no */manifest.toml)")
    return [load_task(manifest) for manifest in manifests]


def _validate(task: Task, manifest: Path) -> None:
    techniques = {t.id for t in load_catalog().technique}
    if task.family not in FAMILIES:
        raise LibraryError(f"{manifest}: family {task.family!r} is not one of {FAMILIES}")
    names = [v.name for v in task.variant]
    if len(set(names)) != len(names) or NAIVE in names:
        raise LibraryError(f"{manifest}: variant names must be unique and not {NAIVE!r}")
    known = {NAIVE, *names}
    seen: set[tuple[str, str]] = set()
    for source, technique, target in task.edges():
        where = f"{manifest}: variant {target}"
        if source not in known:
            raise LibraryError(f"{where} is reached from unknown variant {source!r}")
        if technique not in techniques:
            raise LibraryError(f"{where} is reached by {technique!r}, not a catalog technique")
        if (source, technique) in seen:
            raise LibraryError(f"{where}: ({source}, {technique}) already leads to another variant")
        seen.add((source, technique))
    for name in [NAIVE, *names]:
        predicted = task.prediction(name)
        if predicted is None:
            continue
        if predicted.like.count("/") != 1 or (predicted.speedup or 1.0) <= 0:
            raise LibraryError(
                f'{manifest}: {name}\'s prediction needs like = "task/variant" (a measured '
                f"kernel) and a positive speedup, not {predicted.like!r}, {predicted.speedup}"
            )
    for name in [NAIVE, *names]:
        if not task.source_path(name).is_file():
            raise LibraryError(f"{manifest}: {task.source_path(name)} does not exist")
    if not task.reference.is_file():
        raise LibraryError(f"{manifest}: the reference {task.reference} does not exist")


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- the measured table ----------------------------------------------------------------------


class Measurement(msgspec.Struct, kw_only=True):
    """One variant (or a task's naive kernel) through the real harness, once."""

    task: str
    variant: str
    source_sha256: str  # of the file measured: a changed file is measured again
    # of the task's reference: a changed reference measures its task's kernels again (None:
    # not recorded)
    reference_sha256: str | None = None
    outcome: VariantOutcome
    detail: str = ""  # compiler errors or the verification message, truncated
    time_ms: float | None = None  # median over the harness's timed repetitions
    p20_ms: float | None = None
    p80_ms: float | None = None
    repetitions: int = 0
    spread: float | None = None  # standard deviation of log(time) across repetitions
    state: PerfState | None = None  # of the kernel that takes most of the time
    kernel_ns: dict[str, float] = {}  # every profiled kernel's duration
    eager_ms: float | None = None  # PyTorch eager on the same inputs
    compile_ms: float | None = None  # torch.compile
    seconds: float = 0.0  # what measuring it took


class Transition(msgspec.Struct, kw_only=True, rename={"source": "from", "target": "to"}):
    """An edge of the library with its measured outcome: applying `technique` to `source`."""

    task: str
    source: str
    technique: str
    target: str
    outcome: TransitionOutcome
    speedup: float | None = None  # median time of source / median time of target, when verified
    time_ms: float | None = None  # the target's median
    spread: float | None = None  # the target's
    state_before: str | None = None
    state_after: str | None = None


class LearningTable(msgspec.Struct, kw_only=True):
    format: Literal["kernelblaster-learning-table"] = TABLE_FORMAT
    version: int = 1
    device: str
    arch: str
    min_speedup: float  # a verified target at least this much faster counts as a success
    note: str = ""  # e.g. "test fixture: invented numbers"
    measurements: list[Measurement] = []
    transitions: list[Transition] = []

    def measurement(self, task: str, variant: str) -> Measurement | None:
        return next((m for m in self.measurements if (m.task, m.variant) == (task, variant)), None)

    def current(self, task: Task, variant: str) -> Measurement | None:
        """`variant`'s measurement when it measured its current source against its task's
        current reference (a reference digest not recorded counts as current); else None."""
        done = self.measurement(task.task, variant)
        if done is None or done.source_sha256 != source_digest(task.source_text(variant)):
            return None
        reference = source_digest(task.reference.read_text())
        return done if done.reference_sha256 in (None, reference) else None


def spread_from_quantiles(p20_ms: float, p80_ms: float) -> float:
    """The standard deviation of log(time) of a log-normal with these 20th/80th percentiles."""
    z80 = 0.8416212335729143  # the standard normal's 80th percentile
    return max(0.0, math.log(p80_ms / p20_ms) / (2 * z80))


def transitions(tasks: list[Task], table: LearningTable) -> list[Transition]:
    """Every edge whose two ends are measured, with its outcome."""
    found = []
    for task in tasks:
        for source, technique, target in task.edges():
            before = table.measurement(task.task, source)
            after = table.measurement(task.task, target)
            if before is None or after is None or before.outcome != "verified":
                continue
            edge = Transition(
                task=task.task,
                source=source,
                technique=technique,
                target=target,
                outcome="regression",
                state_before=before.state.state if before.state else None,
            )
            if after.outcome != "verified":
                edge.outcome = after.outcome
            else:
                assert before.time_ms is not None and after.time_ms is not None
                edge.speedup = before.time_ms / after.time_ms
                edge.outcome = "success" if edge.speedup >= table.min_speedup else "regression"
                edge.time_ms, edge.spread = after.time_ms, after.spread
                edge.state_after = after.state.state if after.state else None
            found.append(edge)
    return found


def read_table(path: Path) -> LearningTable:
    try:
        table = msgspec.json.decode(path.read_bytes(), type=LearningTable)
    except (OSError, msgspec.DecodeError) as exc:
        raise LibraryError(f"{path}: not a learning table ({exc})") from exc
    return table


def write_table(path: Path, table: LearningTable) -> None:
    """Atomically: a run killed mid-write leaves the previous table."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(table), indent=1) + b"\n")
    tmp.replace(path)
