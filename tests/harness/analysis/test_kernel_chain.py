"""The kernel_chain finding: a launcher that runs a chain of kernels (the real H100 capture of
bias_gelu_scale's three passes: add_bias, gelu_inplace, scale_inplace) gets it on the state the
loop ranks from, with the other kernels' share of the GPU time as its estimate; with it, fusion
is ranked first on a fresh KB, where before it was capped below every technique aimed at the
passes' generic findings."""

from __future__ import annotations

import msgspec
import pytest

from kernelblaster.agents.loop.evaluation import evaluation_of
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.findings import CHAIN_MIN_SHARE, with_kernel_chain
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    Finding,
    Timing,
    VerifyResult,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.kb.store import KnowledgeBase
from tests.tests_paths import REPO

CHAIN = REPO / "tests" / "fixtures" / "ncu" / "h100-examples" / "bias_gelu_scale.ncu-rep"


@pytest.fixture(scope="module")
def report():
    return read_report(CHAIN)


def _verified(report) -> WorkerResponse:
    ms = sum(k.duration_ns or 0.0 for k in report.kernels) / 1e6
    return WorkerResponse(
        build=BuildResult(ok=True, source="/x/bias_gelu_scale.cu", arch="sm_90"),
        check=CheckResult(
            source="/x/bias_gelu_scale.cu",
            target_kind="plain",
            timing=Timing(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, repetitions=9),
            verify=VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, message="matches"),
        ),
        profile=report,
        states=classify_report(report),
    )


def test_the_loop_sees_the_chain_its_launcher_runs(report):
    evaluation = evaluation_of(_verified(report), None)
    durations = {k.name: k.duration_ns for k in report.kernels}
    dominant = max(durations, key=lambda name: durations[name])
    assert evaluation.state is not None and evaluation.state.kernel == dominant
    chain = next(f for f in evaluation.state.findings if f.id == "kernel_chain")
    others = 1 - durations[dominant] / sum(durations.values())
    assert chain.estimated_speedup == pytest.approx(100 * others)
    assert 60 < chain.estimated_speedup < 70  # three passes of about equal length
    assert chain.evidence == {"kernels": 3.0, "other_kernels_share": round(others, 4)}
    # the classifier's own findings stay, ordered as `find` orders them
    estimates = [f.estimated_speedup or 0.0 for f in evaluation.state.findings]
    assert estimates == sorted(estimates, reverse=True) and len(estimates) == 4


def test_one_kernel_or_a_negligible_rest_is_no_chain(report):
    (state, *_) = classify_report(report)
    assert with_kernel_chain(state, [1.0]) is state
    assert with_kernel_chain(state, []) is state
    small = CHAIN_MIN_SHARE * 0.9
    assert with_kernel_chain(state, [1 - small, small]) is state
    chained = with_kernel_chain(state, [0.5, 0.3, 0.2])
    assert [f.estimated_speedup for f in chained.findings if f.id == "kernel_chain"] == [
        pytest.approx(50.0)
    ]
    # applied twice (a state that already has one), it is replaced, not repeated
    again = with_kernel_chain(chained, [0.8, 0.2])
    assert [f.estimated_speedup for f in again.findings if f.id == "kernel_chain"] == [
        pytest.approx(20.0)
    ]


def test_with_the_chain_fusion_comes_first_on_a_fresh_kb(tmp_path, report):
    state = evaluation_of(_verified(report), None).state
    assert state is not None
    alone = msgspec.structs.replace(
        state, findings=[f for f in state.findings if f.id != "kernel_chain"]
    )
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        ranked = kb.rank(state.arch, state.state, state.findings)
        without = [r.technique for r in kb.rank(alone.arch, alone.state, alone.findings)]
    assert ranked[0].technique == "kernel_fusion" and ranked[0].basis == "ncu_estimate"
    assert "kernel_chain" in ranked[0].explanation
    # the same pass without the chain (a latency-bound state): fusion addresses neither it nor
    # its findings and is not even offered
    assert "kernel_fusion" not in without


def test_a_finding_it_does_not_know_is_kept_apart(report):
    """with_kernel_chain only adds its own finding: the rest are the classifier's, untouched."""
    (state, *_) = classify_report(report)
    extra = Finding(id="register_spills", message="registers spill")
    state = msgspec.structs.replace(state, findings=[*state.findings, extra])
    chained = with_kernel_chain(state, [0.4, 0.6])
    assert {f.id for f in chained.findings} == {f.id for f in state.findings} | {"kernel_chain"}
