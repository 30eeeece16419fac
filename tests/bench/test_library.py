"""The task library (bench/learning/tasks): its shape, its validation, and real nvcc builds of
every variant (the build failures must be the ones meant to fail)."""

from __future__ import annotations

import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelblaster.agents.replay.table import (
    FAMILIES,
    NAIVE,
    LibraryError,
    load_library,
    load_task,
)
from kernelblaster.harness.analysis.cuda_source import extern_c_functions
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.harness.target.reference_signature import describe
from kernelblaster.settings import Settings
from tests.agents.replay.fixture_table import LIBRARY


def test_the_library_covers_the_kinds_of_kernels_with_paths_and_failures(library):
    assert len(library) >= 10
    categories = Counter(t.category for t in library)
    for category in ("elementwise", "reduction", "softmax", "norm", "gemm", "convolution"):
        assert categories[category] >= 1, category
    assert categories["fusion"] >= 2
    expectations = Counter()
    for task in library:
        assert len(task.variant) >= 5, task.task
        assert task.reference.name == f"{task.task}.py"
        two_step = [e for e in task.edges() if e[0] != NAIVE]
        assert two_step, f"{task.task} has no rewrite of a rewrite"
        expectations.update(v.expect for v in task.variant)
    assert min(expectations[k] for k in ("success", "regression", "build_error", "wrong")) >= 5
    assert sum(len(t.variant) for t in library) >= 60


def test_every_family_has_five_kernels_whose_fixes_recur(library):
    """Held-out kernels must meet their fixes in training: every family has at least 5 kernels,
    and every technique set that reaches an intended success of a kernel shares a technique
    with another kernel's (in its family for all but at most one kernel of a family: the odd
    one out, e.g. a head-split permute among transposes, learns from other families)."""
    families = Counter(t.family for t in library)
    assert set(families) == set(FAMILIES)
    assert min(families.values()) >= 5, families
    assert len(library) >= 25
    useful = {
        t.task: {e.technique for v in t.variant if v.expect == "success" for e in v.reached_by}
        for t in library
    }
    for family in FAMILIES:
        members = [t.task for t in library if t.family == family]
        loners = []
        for task in members:
            kin = set().union(*(useful[name] for name in members if name != task))
            anywhere = set().union(*(s for name, s in useful.items() if name != task))
            assert useful[task] & anywhere, f"{task}: no useful technique recurs anywhere"
            if not useful[task] & kin:
                loners.append(task)
        assert len(loners) <= 1, f"{family}: {loners} share no useful technique in the family"


def test_a_manifest_with_an_unknown_family_is_refused(tmp_path):
    task = tmp_path / "gelu"
    shutil.copytree(LIBRARY / "gelu", task)
    manifest = task / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('family = "elementwise"', 'family = "misc"'))
    with pytest.raises(LibraryError, match="family 'misc' is not one of"):
        load_task(manifest)


def test_a_manifest_naming_an_unknown_technique_or_variant_is_refused(tmp_path):
    source = LIBRARY / "gelu"
    task = tmp_path / "gelu"
    shutil.copytree(source, task)
    manifest = task / "manifest.toml"
    text = manifest.read_text()
    manifest.write_text(
        text.replace('technique = "vectorized_loads" }', 'technique = "magic" }', 1)
    )
    with pytest.raises(LibraryError, match="'magic', not a catalog technique"):
        load_task(manifest)
    manifest.write_text(text.replace('{ from = "vec4"', '{ from = "vec8"', 1))
    with pytest.raises(LibraryError, match="unknown variant 'vec8'"):
        load_task(manifest)
    manifest.write_text(
        text.replace('technique = "thread_coarsening" }]', 'technique = "vectorized_loads" }]', 1)
    )
    with pytest.raises(LibraryError, match=r"\(naive, vectorized_loads\) already leads"):
        load_task(manifest)
    with pytest.raises(LibraryError, match="holds no task"):
        load_library(tmp_path / "nothing")


@pytest.mark.nvcc
def test_every_variant_builds_unless_it_is_meant_to_fail(library):
    settings = Settings(arch="sm_90")
    kernels = [(t, NAIVE, "verified") for t in library]
    kernels += [(t, v.name, v.expect) for t in library for v in t.variant]

    def build(item):
        task, variant, _ = item
        request = WorkerRequest(
            task="build",
            source=str(task.source_path(variant)),
            reference=str(task.reference),
            settings=settings,
        )
        return item, run_harness_sync(request, settings).build

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(build, kernels))
    wrong = []
    for (task, variant, expect), built in results:
        meant_to_fail = expect == "build_error"
        errors = [d.message for d in built.diagnostics if d.severity == "error"]
        if built.ok == meant_to_fail or (meant_to_fail and not errors):
            wrong.append(f"{task.task}/{variant}: ok={built.ok}, expected {expect}, {errors[:1]}")
    assert wrong == []


C_DTYPES = {"float": "float32", "__half": "float16", "__nv_bfloat16": "bfloat16", "int": "int32"}


def test_every_launcher_matches_its_references_calling_convention(library):
    """What the harness passes a plain launcher (harness/target/plain_launch.py), checked on the
    CPU so a GPU session is not spent on a signature mistake: one pointer per input,
    parameter/buffer and output, in that order and of its dtype, and every scalar a name the
    reference defines (or n / numel / size)."""
    wrong = []
    for task in library:
        signature = describe(task.reference)
        assert not signature.unknown, (task.task, signature.unknown)
        dtypes = [s.dtype for s in signature.pointers]
        names = {s.name for s in signature.scalars} | {"n", "numel", "size"}
        for variant in [NAIVE, *(v.name for v in task.variant)]:
            launchers = extern_c_functions(task.source_text(variant))
            if len(launchers) != 1 or launchers[0].name != task.task:
                wrong.append(f"{task.task}/{variant}: launchers {[f.name for f in launchers]}")
                continue
            params = launchers[0].params
            pointers = [C_DTYPES.get(p.base_type, p.base_type) for p in params if p.pointer]
            if pointers != dtypes:
                wrong.append(f"{task.task}/{variant}: pointers {pointers}, reference {dtypes}")
            for p in params:
                if not p.pointer and p.base_type != "cudaStream_t" and p.name not in names:
                    wrong.append(f"{task.task}/{variant}: scalar {p.name} not in the reference")
    assert wrong == []
