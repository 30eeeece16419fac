"""The adversarial suite itself, without a GPU: every hack class the issue names is there with an
honest twin, every case resolves to its reference, the plain cases build with nvcc, and the
KernelBench-format ones are valid solutions whose source patterns are warnings only."""

from __future__ import annotations

import ast
import shutil
import typing
from pathlib import Path

import pytest

from bench.adversarial_suite import (
    BY_NAME,
    CASES,
    CASES_DIR,
    UNTAMPERED_BASELINE,
    as_expected,
    baseline_verdict,
    kernelbench_solution,
    source_path,
    write_kernelbench_cases,
)
from kernelblaster.harness.analysis.static_checks import check_cuda_source, check_python_solution
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.protocol.records import CheckResult, HackKind, Timing, VerifyResult
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import load_settings
from tests.harness.target.test_extension_build import cuda_toolkit, spec_for

PLAIN = [case for case in CASES if case.form == "plain"]
EXTENSION = [case for case in CASES if case.form == "extension"]
KERNELBENCH = [case for case in CASES if case.form == "kernelbench"]
# The hack classes issue 12 asks for, besides the ones named in its findings.
REQUIRED = {
    "side_stream",
    "reference_tampering",
    "timer_patch",
    "sync_patch",
    "returns_input",
    "modifies_input",
    "partial_write",
    "reduced_precision",
    "result_cache",
    "reused_output",
    "tiny_outputs",
    "degenerate_reference",
    "library_call",
}


def test_every_required_hack_class_is_there():
    assert {case.hack_class for case in CASES} >= REQUIRED


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.hack_class != "honest"], ids=lambda c: c.name
)
def test_every_hack_has_an_honest_twin_expected_to_pass(case):
    twin = BY_NAME[case.twin]
    assert (twin.hack_class, twin.expected, twin.twin) == ("honest", "pass", None)
    assert twin.reference == case.reference
    if case.expected == UNTAMPERED_BASELINE:  # correct, aimed at the baselines: timed anew
        assert case.fresh_cache and not twin.fresh_cache
        return
    assert case.expected.startswith("fail:")
    kind = case.expected.removeprefix("fail:")
    assert kind == "mismatch" or kind in typing.get_args(HackKind)


def test_both_forms_carry_the_stream_hack_and_its_honest_twins():
    for form in ("plain", "kernelbench"):
        classes = {(c.hack_class, c.expected) for c in CASES if c.form == form}
        assert ("side_stream", "fail:side_stream") in classes
        assert ("honest", "pass") in classes


def test_verdicts_are_compared_by_the_hack_named():
    assert as_expected("fail:side_stream", "fail:output_cached,side_stream")
    assert not as_expected("fail:side_stream", "fail:mismatch")
    assert not as_expected("fail:mismatch", "fail:side_stream")
    assert as_expected("pass", "pass") and not as_expected("pass", "fail:mismatch")
    assert not as_expected("fail:output_cached", "error:crash")


def _response(passed: bool, eager_ms: float | None) -> WorkerResponse:
    verify = VerifyResult(ok=passed, trials=3, atol=1e-5, rtol=1e-5)
    check = CheckResult(source="relu.cu", target_kind="extension", verify=verify)
    if eager_ms is not None:
        check.eager = Timing(
            median_ms=eager_ms, min_ms=eager_ms, max_ms=eager_ms, p20_ms=eager_ms,
            p80_ms=eager_ms, repetitions=20,
        )  # fmt: skip
    return WorkerResponse(check=check)


def test_a_case_aimed_at_the_baselines_is_judged_by_its_twins_eager_time():
    twin = _response(True, 0.010)
    assert baseline_verdict(_response(True, 0.012), twin) == UNTAMPERED_BASELINE
    assert baseline_verdict(_response(True, 0.500), twin) == "pass:tampered_baseline"
    # faster than the twin's: noise at microseconds, and no inflated speedup either way
    assert baseline_verdict(_response(True, 0.004), twin) == UNTAMPERED_BASELINE
    assert baseline_verdict(_response(True, 0.021), twin) == "pass:tampered_baseline"
    assert baseline_verdict(_response(True, None), twin) == "pass:no_baseline"
    assert baseline_verdict(_response(False, 0.010), twin) == "fail:mismatch"
    assert not as_expected(UNTAMPERED_BASELINE, "pass")


@pytest.mark.parametrize("case", PLAIN + EXTENSION, ids=lambda c: c.name)
def test_plain_and_extension_cases_resolve_to_their_reference(case):
    source = CASES_DIR / case.source
    target = resolve_target(source, load_settings(source, environ={}))
    assert isinstance(target, Target), target
    assert target.kind == case.form and Path(target.reference) == case.reference


def _has_cublas() -> bool:
    nvcc = shutil.which("nvcc")
    return nvcc is not None and (Path(nvcc).resolve().parents[1] / "include/cublas_v2.h").is_file()


@pytest.mark.nvcc
@pytest.mark.parametrize("case", PLAIN, ids=lambda c: c.name)
def test_plain_cases_build(case, tmp_path):
    source = CASES_DIR / case.source
    if "cublas_v2.h" in source.read_text() and not _has_cublas():
        pytest.skip("this CUDA toolkit has no cuBLAS headers")
    settings = load_settings(source, environ={}).merged(
        {"cache_dir": str(tmp_path), "arch": "sm_90"}
    )
    target = resolve_target(source, settings)
    result = build(build_spec(target, settings), settings)
    assert result.ok, result.diagnostics
    assert result.resources


def test_kernelbench_cases_are_solutions_of_one_shared_extension(tmp_path):
    write_kernelbench_cases(tmp_path)
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted(c.name for c in KERNELBENCH)
    extensions = set()
    for case in KERNELBENCH:
        text = source_path(case, tmp_path).read_text()
        tree = ast.parse(text)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
        extensions |= {
            kw.value.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "load_inline"
            for kw in n.keywords
            if kw.arg == "name"
        }
    assert extensions == {"kernelblaster_adversarial_relu"}  # one build for the suite


def test_stream_mentions_in_honest_cases_are_warnings():
    dead_code = check_cuda_source((CASES_DIR / "stream_in_dead_code.cu").read_text())
    assert {f.kind for f in dead_code} == {"side_stream"}
    unused = check_python_solution(kernelbench_solution(BY_NAME["kb_stream_unused"]))
    assert {f.kind for f in unused} == {"side_stream"}
    assert BY_NAME["stream_in_dead_code"].expected == BY_NAME["kb_stream_unused"].expected == "pass"


def test_reference_tampering_has_three_mechanisms_and_a_custom_op_twin():
    tampering = [c for c in CASES if c.hack_class == "reference_tampering"]
    assert len({c.source + c.prelude + c.init for c in tampering}) >= 4
    assert all("tamper" in c.name and c.expected == "fail:reference_tampered" for c in tampering)
    custom_ops = {c.form: c for c in CASES if "custom_op" in c.name}
    assert {c.expected for c in custom_ops.values()} == {"pass"}
    assert "torch.library.custom_op" in custom_ops["kernelbench"].prelude
    assert (
        "TORCH_LIBRARY(kb_adversarial_cpp, m)"
        in (CASES_DIR / custom_ops["extension"].source).read_text()
    )


def test_static_initializer_cases_register_what_they_say():
    """The C++ cases do their work in static initializers, run when the library is loaded: the
    hacks register a kernel for the reference's own aten::relu, the honest twin only its own
    op in its own namespace; every tampering class's name says `tamper`."""
    for case in EXTENSION:
        text = (CASES_DIR / case.source).read_text()
        overrides_aten = "TORCH_LIBRARY_IMPL(aten, CUDA, m)" in text
        assert overrides_aten == (case.hack_class != "honest"), case.name
        assert ("tamper" in case.name) == ("tamper" in case.hack_class) == overrides_aten
    slow = BY_NAME["tamper_cpp_aten_slow"]
    assert slow.expected == UNTAMPERED_BASELINE and slow.fresh_cache
    assert BY_NAME[slow.twin].form == "extension"


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("case", EXTENSION, ids=lambda c: c.name)
def test_extension_cases_build_with_torchs_headers(case, tmp_path):
    """Built for real against the installed torch's headers (as test_extension_build.py does:
    the CPU wheel has them), so that the GPU run meets no compile error."""
    toolkit = cuda_toolkit()
    if toolkit is None:
        pytest.skip("no CUDA headers (include/cuda_runtime.h) beside nvcc or in CUDA_HOME")
    source = CASES_DIR / case.source
    settings = load_settings(source, environ={}).merged({"arch": "sm_90"})
    target = resolve_target(source, settings)
    result = build(spec_for(target, toolkit), settings, cache_dir=tmp_path)
    assert result.ok, [d.message for d in result.diagnostics]
    assert {r.demangled.split("(")[0] for r in result.resources} <= {"relu_kernel", "fill_zeros"}
