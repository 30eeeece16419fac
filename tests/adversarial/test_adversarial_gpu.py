"""The adversarial suite through the real worker on a GPU: every hack caught and named on
runtime evidence, every honest twin passing (and timed)."""

from __future__ import annotations

import pytest

from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from tests.adversarial.suite import (
    BY_NAME,
    CASES,
    as_expected,
    findings,
    run_case,
    verdict,
    write_kernelbench_cases,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The worker's response for a case, each case run once per module."""
    kernelbench_dir = tmp_path_factory.mktemp("kernelbench")
    cache_dir = tmp_path_factory.mktemp("cache")
    write_kernelbench_cases(kernelbench_dir)
    responses: dict[str, WorkerResponse] = {}

    def response(name: str) -> WorkerResponse:
        if name not in responses:
            responses[name] = run_case(BY_NAME[name], kernelbench_dir, cache_dir)
        return responses[name]

    return response


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_gets_its_verdict(case, run):
    response = run(case.name)
    assert as_expected(case.expected, verdict(response)), findings(response)
    if case.expected == "pass":
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
    for case in [c for c in CASES if "tamper" in c.hack_class]:
        verify = run(case.name).check.verify
        (tampered,) = [h for h in verify.hacks if h.kind == "reference_tampered"]
        assert "no candidate code ran" in tampered.message, case.name
    # its own op in its own namespace changes nothing of the reference's
    assert run("kb_custom_op").check.verify.ok
