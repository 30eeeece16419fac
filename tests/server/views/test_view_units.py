"""Pure parts of the views: severities, verification diagnostics, a proposed technique in the
hover."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from kernelblaster.harness.protocol.records import (
    CheckResult,
    HackFinding,
    VerifyResult,
    VerifyWarning,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.server.editor.kernel_locator import locate
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.views.diagnostics import FileContext, file_diagnostics, severity_for_gain


def test_severity_follows_the_estimated_gain():
    assert severity_for_gain(77.0) == types.DiagnosticSeverity.Warning
    assert severity_for_gain(20.0) == types.DiagnosticSeverity.Warning
    assert severity_for_gain(17.6) == types.DiagnosticSeverity.Information
    assert severity_for_gain(3.0) == types.DiagnosticSeverity.Hint
    assert severity_for_gain(None) == types.DiagnosticSeverity.Hint


def _verified(verify: VerifyResult) -> list[types.Diagnostic]:
    text = (
        "__global__ void k(float* y) { y[0] = 1.0f; }\n"
        'extern "C" void launch(float* y) {\n'
        "    if (false) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n"
        "    k<<<1, 1>>>(y);\n"
        "}\n"
    )
    result = FileResult(
        source="/w/k.cu",
        text_hash="h",
        time=0.0,
        response=WorkerResponse(
            check=CheckResult(source="/w/k.cu", target_kind="plain", verify=verify)
        ),
    )
    context = FileContext(
        uri="file:///w/k.cu", path=Path("/w/k.cu"), lines=text.splitlines(), kernels=locate(text)
    )
    return [d for d in file_diagnostics(result, context, text_hash="h") if d.code == "verify"]


def test_a_source_pattern_warns_on_its_line_even_when_verification_passes():
    warning = VerifyWarning(kind="side_stream", message="`cudaStreamCreateWithFlags`: ...", line=3)
    (diagnostic,) = _verified(
        VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, warnings=[warning])
    )
    assert diagnostic.severity == types.DiagnosticSeverity.Warning
    assert diagnostic.range.start.line == 2 and diagnostic.data == {"kind": "side_stream"}


def test_a_hack_fails_with_an_error_and_warnings_stay_warnings():
    verify = VerifyResult(
        ok=False,
        trials=3,
        atol=1e-4,
        rtol=1e-4,
        hacks=[HackFinding(kind="side_stream", message="its outputs were still being written")],
        warnings=[VerifyWarning(kind="weak_reference", message="degenerate reference")],
        message="its outputs were still being written",
    )
    severities = [(d.severity, d.message) for d in _verified(verify)]
    assert severities == [
        (types.DiagnosticSeverity.Error, "its outputs were still being written"),
        (types.DiagnosticSeverity.Error, "its outputs were still being written"),
        (types.DiagnosticSeverity.Warning, "degenerate reference"),
    ]


def test_hover_marks_a_proposed_technique_ranked_below_the_catalog(tmp_path):
    from kernelblaster.kb.records import Proposal, Technique
    from kernelblaster.kb.store import KnowledgeBase
    from kernelblaster.server.views.hover import kernel_hover

    technique = Technique(
        id="streaming_store_hints",
        category="learned",
        title="Streaming cache hints",
        description="Evict-first loads and stores for data used once.",
        how_to_apply="Use the cache-streaming intrinsics for single-use arrays.",
        addresses_states=["memory.dram"],
        addresses_findings=["uncoalesced_global_access"],
        prior_speedup=3.0,
        prior_source="proposed by test-model: single-use data",
    )
    with KnowledgeBase.open(tmp_path / "kb.sqlite3") as kb:
        kb.propose(
            Proposal(
                technique=technique,
                arch="sm_90",
                state="memory.dram",
                kernel="relu_naive",
                model="test-model",
                time=1_700_000_000.0,
            )
        )
        ranked = kb.rank("sm_90", "memory.dram")
    text = kernel_hover("relu_naive", None, ranked, current=True)
    (line,) = [line for line in text.splitlines() if "Streaming cache hints" in line]
    assert "*(proposed by an agent, on trial)*" in line
    assert line.startswith(f"{len(ranked)}. ")  # on trial: below every catalog technique
    assert sum("proposed by an agent" in line for line in text.splitlines()) == 1


def test_the_hover_sparkline_includes_a_save_timed_while_its_profile_runs():
    """A save verified and timed is shown with its delta at once; the history records it only
    when its profile ends. The sparkline beside the delta has it too, not only the older saves."""
    from kernelblaster.server.results.history import Change, HistoryPoint, SaveDelta
    from kernelblaster.server.views.hover import kernel_hover

    timed = FileResult(
        source="/w/k.cu",
        text_hash="new",
        time=0.0,
        response=WorkerResponse(check=CheckResult(source="/w/k.cu", target_kind="plain")),
    )
    opened = HistoryPoint(time=0.0, text_hash="old", median_ms=2.0, p20_ms=1.9, p80_ms=2.1)
    faster = Change(factor=2.0 / 1.5, within_noise=False)
    delta = SaveDelta(median_ms=1.5, previous=faster, since_opened=faster)
    text = kernel_hover("k", timed, [], current=True, delta=delta, history=[opened])
    assert "**1.50 ms per call — 1.33× faster than the previous save" in text
    assert "Last 2 saves (median per call, oldest first): `█▁` 2.00 ms → 1.50 ms" in text
    # once recorded, the point is not counted twice
    recorded = HistoryPoint(time=1.0, text_hash="new", median_ms=1.5, p20_ms=1.4, p80_ms=1.6)
    text = kernel_hover("k", timed, [], current=True, delta=delta, history=[opened, recorded])
    assert "Last 2 saves" in text


def test_ncu_estimates_are_a_share_of_the_runtime_bounding_the_speedup():
    from kernelblaster.server.views.formatting import ncu_estimate

    # Nsight Compute's "Est. Speedup 87%" is the runtime a fix could save: at most 1/(1-0.87)
    assert ncu_estimate(87.0) == "ncu: up to 87% of runtime could be saved (≤ 7.7×)"
    assert ncu_estimate(50.0) == "ncu: up to 50% of runtime could be saved (≤ 2.0×)"
    assert ncu_estimate(100.0) == "ncu: up to 100% of runtime could be saved"  # no finite bound
