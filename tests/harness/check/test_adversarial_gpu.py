"""The adversarial suite through the real worker on a GPU: every hack caught and named on
runtime evidence, every honest twin passing (and timed). `-k cpp` runs the PyTorch-extension
cases alone (their static initializers register operators when they load)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.adversarial_suite import (
    BASELINE_SPREAD,
    BY_NAME,
    CASES,
    CASES_DIR,
    UNTAMPERED_BASELINE,
    as_expected,
    baseline_verdict,
    findings,
    prepare,
    run_case,
    source_path,
    verdict,
    write_kernelbench_cases,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.harness.target.targets import extension_module_name, resolve_target
from kernelblaster.settings import load_settings

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The worker's response for a case, each case run once per module. The first case of a
    form to run has every case of its form prepared first (suite.prepare: their builds at once,
    one per core, and their references' baselines measured apart meanwhile): `-k cpp` builds
    its three torch extensions together, once, and each check then finds its build cached."""
    kernelbench_dir = tmp_path_factory.mktemp("kernelbench")
    cache_dir = tmp_path_factory.mktemp("cache")
    write_kernelbench_cases(kernelbench_dir)
    responses: dict[str, WorkerResponse] = {}
    prepared: set[str] = set()

    def response(name: str) -> WorkerResponse:
        form = BY_NAME[name].form
        if form not in prepared:
            prepared.add(form)
            same_form = [case for case in CASES if case.form == form]
            prepare(same_form, kernelbench_dir, cache_dir, jobs=os.cpu_count() or 1)
        if name not in responses:
            responses[name] = run_case(BY_NAME[name], kernelbench_dir, cache_dir)
        return responses[name]

    return response


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_gets_its_verdict(case, run):
    response = run(case.name)
    if case.expected == UNTAMPERED_BASELINE:
        actual = baseline_verdict(response, run(case.twin))
    else:
        actual = verdict(response)
    assert as_expected(case.expected, actual), findings(response)
    if case.form != "kernelbench":  # built ahead (prepare): the check's build is a cache hit
        assert response.build is not None and response.build.cached, case.name
    if case.expected.startswith("pass"):
        assert response.check.timing is not None and response.check.timing.median_ms > 0
    else:
        assert response.check.timing is None  # nothing unverified is timed


def test_the_issue_12_fake_is_a_side_stream_hack_and_its_stream_only_a_warning(run):
    verify = run("kb_side_stream").check.verify
    assert [h.kind for h in verify.hacks] == ["side_stream"]
    assert "caller's stream" in verify.hacks[0].message
    assert {w.kind for w in verify.warnings} == {"side_stream"}  # torch.cuda.Stream() seen


def test_the_honest_solution_with_a_stream_in_dead_code_passes_with_a_warning(run):
    for name in ("stream_in_dead_code", "kb_stream_unused"):
        verify = run(name).check.verify
        assert verify.ok and verify.hacks == []
        assert [w.kind for w in verify.warnings][:1] == ["side_stream"]


def test_a_degenerate_reference_is_reported_and_checked_on_scaled_inputs(run):
    honest = run("weak_honest").check.verify
    (weak,) = [w for w in honest.warnings if w.kind == "weak_reference"]
    assert weak.evidence["zero_fraction"] > 0.99 and weak.evidence["input_scale"] == 8.0
    zeros = run("weak_zeros").check.verify
    assert not zeros.ok and {m.input_scale for m in zeros.mismatches} == {8.0}


def test_zeros_fail_against_tiny_softmax_outputs(run):
    zeros = run("softmax_zeros").check.verify
    first = zeros.mismatches[0]
    assert first.bad_elements == first.total_elements == 4 * 393_216
    assert 0 < first.expected < 1e-4  # within the old absolute tolerance, not within the new


def test_every_hack_kind_comes_with_a_message(run):
    for case in CASES:
        check = run(case.name).check
        for hack in check.verify.hacks if check and check.verify else []:
            assert hack.message, (case.name, hack.kind)


def test_kernelbench_cases_share_one_extension_build(run):
    # building a solution is importing it (its load_inline): the first case compiles the
    # shared extension, the others find it built
    builds = [run(c.name).build for c in CASES if c.form == "kernelbench"]
    assert all(build.ok for build in builds)
    seconds = sorted(build.seconds for build in builds)
    assert seconds[len(seconds) // 2] < 30.0  # the median: no rebuild per case


def test_a_reference_changed_in_the_candidates_process_is_named_and_changes_nothing(run):
    for case in [c for c in CASES if c.hack_class == "reference_tampering"]:
        verify = run(case.name).check.verify
        (tampered,) = [h for h in verify.hacks if h.kind == "reference_tampered"]
        assert "no candidate code ran" in tampered.message, case.name
    # its own op in its own namespace changes nothing of the reference's
    assert run("kb_custom_op").check.verify.ok


def test_a_cpp_static_initializer_changing_the_reference_is_named_tampering(run):
    verify = run("tamper_cpp_aten_zeros").check.verify
    assert not verify.ok
    (tampered,) = [h for h in verify.hacks if h.kind == "reference_tampered"]
    assert "no candidate code ran" in tampered.message
    # its own op in its own namespace, registered by C++ static initializers too, passes
    assert run("cpp_custom_op").check.verify.ok


# The reference's eager time in a fresh process, before and after the extension is loaded
# there (its static initializers run): what timing the baselines beside the candidate gave.
_EAGER_BESIDE = """
import importlib.util, json, sys
from pathlib import Path
import torch
from kernelblaster.harness.check.timing import CudaClock, time_callable, timing_input_sets
from kernelblaster.harness.target.reference import load_reference

artifact, module, reference = sys.argv[1:4]
device = torch.device("cuda", 0)
torch.cuda.set_device(device)
loaded = load_reference(Path(reference), device)
inputs = timing_input_sets(loaded, [1, 2, 3], device)


def eager(xs):
    with torch.no_grad():
        return loaded.model(*xs)


before = time_callable(eager, inputs, clock=CudaClock(device)).median_ms
spec = importlib.util.spec_from_file_location(module, artifact)
spec.loader.exec_module(importlib.util.module_from_spec(spec))
after = time_callable(eager, inputs, clock=CudaClock(device)).median_ms
print(json.dumps({"before_ms": before, "after_ms": after}))
"""


def _eager_beside(case_name: str, artifact: str) -> dict[str, float]:
    case = BY_NAME[case_name]
    source = source_path(case, CASES_DIR)
    target = resolve_target(source, load_settings(source, environ={}))
    module = extension_module_name(target)
    command = [sys.executable, "-c", _EAGER_BESIDE, artifact, module, str(case.reference)]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_a_cpp_kernel_slowing_the_references_op_moves_no_baseline(run):
    slow, twin = run("tamper_cpp_aten_slow"), run("cpp_custom_op")
    check = slow.check
    assert check.verify.ok  # a correct kernel for relu changes no output: nothing to reject
    assert "baselines" in check.phase_seconds  # timed in its own run, not read from a cache
    beside = _eager_beside("tamper_cpp_aten_slow", slow.build.artifact)
    # where the extension is loaded, eager is many times slower ...
    assert beside["after_ms"] > 10 * beside["before_ms"], beside
    # ... but the baseline the user sees is the untampered one, as its honest twin's is
    assert baseline_verdict(slow, twin) == UNTAMPERED_BASELINE, (check.eager, twin.check.eager)
    assert check.eager.median_ms < BASELINE_SPREAD * beside["before_ms"], beside
    assert check.speedup_vs_eager == pytest.approx(check.eager.median_ms / check.timing.median_ms)
