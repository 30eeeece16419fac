"""`kernelblaster analyze` end to end, through the real CLI entry point; it ranks each kernel
with the user's knowledge base: here, a fresh one per test, never the real user's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelblaster.cli import main
from tests.harness.profile_cases import CASES
from tests.kb.kb_helpers import make_attempt

FIVE = next(case for case in CASES if case.name == "h100-five")
NAIVE3 = next(case for case in CASES if case.name == "h200-naive3")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def fresh_kb(tmp_path, monkeypatch):
    path = tmp_path / "kb.sqlite3"
    monkeypatch.setenv("KERNELBLASTER_KB", str(path))
    return path


def test_json_shape(capsys):
    assert main(["analyze", str(NAIVE3.report), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["device"], document["arch"], document["depth"]) == (
        "NVIDIA H200",
        "sm_90",
        "full",
    )
    kernels = {kernel["name"]: kernel for kernel in document["kernels"]}
    assert set(kernels) == {"relu_naive", "matmul_naive", "softmax_rowthread"}
    softmax = kernels["softmax_rowthread"]
    assert {"name", "bottleneck", "state", "summary", "findings", "metrics"} <= set(softmax)
    assert (softmax["bottleneck"], softmax["state"]) == ("memory", "memory.l1")
    assert softmax["summary"].startswith("memory-bound (L1 74% of peak")
    finding = softmax["findings"][0]
    assert set(finding) >= {"id", "evidence", "estimated_speedup", "lines"}
    assert finding["id"] == "uncoalesced_global_access"
    assert (
        finding["evidence"]["smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"]
        == 4.0
    )
    assert round(finding["estimated_speedup"]) == 87
    assert finding["lines"] == []
    assert softmax["metrics"]["registers_per_thread"] == 31


def test_source_maps_lines_to_the_users_file(tmp_path, capsys):
    source = tmp_path / "five.cu"
    shutil.copy(FIVE.source, source)
    assert main(["analyze", str(FIVE.report), "--source", str(source), "--json"]) == 0
    kernels = {k["name"]: k for k in json.loads(capsys.readouterr().out)["kernels"]}
    transpose = kernels["transpose_naive"]
    assert transpose["file"] == str(source)
    uncoalesced = next(f for f in transpose["findings"] if f["id"] == "uncoalesced_global_access")
    assert uncoalesced["lines"] == [13]

    assert main(["analyze", str(FIVE.report), "--source", str(source)]) == 0
    text = capsys.readouterr().out
    assert "transpose_naive  [memory.l2]" in text
    assert "five.cu:13  if (x < n && y < n) out[x * n + y] = in[y * n + x];" in text
    assert "uncoalesced_global_access (ncu est. 77%)" in text


def test_source_that_matches_no_recorded_file_warns(tmp_path, capsys):
    other = tmp_path / "other.cu"
    other.write_text("// not the profiled file\n")
    assert main(["analyze", str(FIVE.report), "--source", str(other)]) == 0
    captured = capsys.readouterr()
    assert "not other.cu" in captured.err and "five.cu" in captured.err
    assert "five.cu:13" in captured.out


def test_bad_inputs_exit_2_with_a_message(tmp_path, capsys):
    junk = tmp_path / "junk.ncu-rep"
    junk.write_text("junk")
    assert main(["analyze", str(junk)]) == 2
    assert "holds no profiled kernels" in capsys.readouterr().err
    assert main(["analyze", str(FIVE.report), "--source", str(tmp_path / "gone.cu")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_json_ranks_each_kernel_as_the_hover_does(capsys, fresh_kb):
    from kernelblaster.harness.analysis.classify import classify
    from kernelblaster.harness.analysis.ncu_reader import read_report
    from kernelblaster.kb.store import KnowledgeBase
    from kernelblaster.server.results.knowledge import rank_states

    report_path = FIXTURES / "ncu" / "h100-examples" / "softmax.ncu-rep"
    assert main(["analyze", str(report_path), "--json"]) == 0
    (kernel,) = json.loads(capsys.readouterr().out)["kernels"]
    ranking = kernel["ranking"]
    keys = {"technique", "predicted_speedup", "confidence", "basis", "evidence", "proposal"}
    assert all(set(r) == keys for r in ranking)
    assert all(r["proposal"] is None for r in ranking)  # the catalog's, nothing proposed yet
    assert ranking[0]["technique"] == "coalesce_global_access"
    assert ranking[0]["basis"] == "ncu_estimate" and ranking[0]["evidence"] == "no attempts yet"

    report = read_report(report_path)
    state = classify(report.kernels[0], arch=report.arch, device=report.device)
    with KnowledgeBase.open(fresh_kb) as kb:
        hover = rank_states(kb, {state.kernel: state})[state.kernel]
    assert [r["technique"] for r in ranking] == [r.technique for r in hover]
    assert [r["predicted_speedup"] for r in ranking] == [r.predicted_speedup for r in hover]

    assert main(["analyze", str(report_path)]) == 0
    assert "1. Coalesce global memory accesses: predicted 2.75x" in capsys.readouterr().out

    # once the KB has learned, each prediction says which attempts it rests on
    with KnowledgeBase.open(fresh_kb) as kb:
        for speedup in (18.0, 21.0):
            kb.record(
                make_attempt(
                    arch=state.arch,
                    before_state=state.state,
                    measured_speedup=speedup,
                    target_finding="uncoalesced_global_access",
                )
            )
    assert main(["analyze", str(report_path), "--json"]) == 0
    (kernel,) = json.loads(capsys.readouterr().out)["kernels"]
    top = kernel["ranking"][0]
    assert (top["technique"], top["basis"]) == ("coalesce_global_access", "this_arch")
    assert top["evidence"] == "2 attempts on sm_90 on kernels with uncoalesced_global_access"


def test_a_proposed_technique_is_marked_in_json_and_text(capsys, fresh_kb):
    from kernelblaster.harness.analysis.classify import classify
    from kernelblaster.harness.analysis.ncu_reader import read_report
    from kernelblaster.kb.records import Proposal, Technique
    from kernelblaster.kb.store import KnowledgeBase

    report_path = FIXTURES / "ncu" / "h100-examples" / "softmax.ncu-rep"
    report = read_report(report_path)
    state = classify(report.kernels[0], arch=report.arch, device=report.device)
    technique = Technique(
        id="warp_per_row_online_softmax",
        category="learned",
        title="One warp per row, online max and sum",
        description="One warp per row computing a running max and rescaled sum in one pass.",
        how_to_apply="Launch a warp per row and combine the lanes with shuffles.",
        addresses_states=[state.state],
        addresses_findings=["uncoalesced_global_access"],
        prior_speedup=3.0,
        prior_source="proposed by test-model: one read pass",
    )
    with KnowledgeBase.open(fresh_kb) as kb:
        kb.propose(
            Proposal(
                technique=technique,
                arch=state.arch,
                state=state.state,
                kernel="softmax_rowthread",
                model="test-model",
                time=1_700_000_000.0,
            )
        )
    assert main(["analyze", str(report_path), "--json"]) == 0
    (kernel,) = json.loads(capsys.readouterr().out)["kernels"]
    marks = {r["technique"]: r["proposal"] for r in kernel["ranking"]}
    assert marks["warp_per_row_online_softmax"] == "proposed"
    assert list(marks)[-1] == "warp_per_row_online_softmax"  # on trial: below the catalog
