"""Save pipeline end to end: a pytest-lsp client opens a real kernel, the (replay) worker
answers with a real ncu report, and the server publishes state and line diagnostics with
progress and job status along the way."""

from __future__ import annotations

from lsprotocol import types

from bench.lsp_session import copy_five, five_response, wait_until
from tests.server.conftest import by_code, open_document, start, wait_for_states


async def test_open_publishes_state_and_line_diagnostics(client, workspace):
    source = copy_five(workspace)
    await start(client, workspace)
    uri = open_document(client, source)
    diagnostics = await wait_for_states(client, uri, count=5)

    states = {d.message.split(":")[0]: d for d in by_code(diagnostics, "state")}
    # every profiled kernel, at its __global__ declaration's name (five.cu line 10 → LSP 9)
    assert set(states) == {
        "transpose_naive",
        "smem_column_sum",
        "divergent",
        "register_hog",
        "wmma_gemm",
    }
    transpose = states["transpose_naive"]
    assert transpose.range.start == types.Position(9, 16)
    assert transpose.range.end == types.Position(9, 31)
    assert transpose.severity == types.DiagnosticSeverity.Information
    assert transpose.source == "kernelblaster"
    assert transpose.message.startswith("transpose_naive: memory-bound (L2 87% of peak, DRAM 13%)")
    assert "global stores use 4 of 32 bytes per sector" in transpose.message
    assert transpose.message.endswith("— ncu kernel duration 0.288 ms")

    # ncu blames line 13 for uncoalesced stores (est. 77% → Warning), pointing back at the kernel
    (uncoalesced,) = [
        d for d in by_code(diagnostics, "uncoalesced_global_access") if d.range.start.line == 12
    ]
    assert uncoalesced.severity == types.DiagnosticSeverity.Warning
    assert "4 of 32 bytes per sector" in uncoalesced.message
    (related,) = uncoalesced.related_information
    assert related.location.uri == uri and related.location.range == transpose.range
    # one entry per finding: smem_column_sum's barrier stalls (lines 21 and 24) are one
    # diagnostic at line 21, its other line related to it, not the same finding twice
    (barrier,) = by_code(diagnostics, "stall_barrier")
    assert barrier.range.start.line == 20
    kernel, also = barrier.related_information
    assert kernel.message == "in kernel smem_column_sum"
    assert (also.message, also.location.range.start.line) == ("also line 24", 23)
    # a finding under 20% is Information; one under 5% would be a Hint
    (register_loads,) = [
        d for d in by_code(diagnostics, "uncoalesced_global_access") if d.range.start.line == 45
    ]
    assert register_loads.severity == types.DiagnosticSeverity.Information
    # markers ncu put in CUDA's own headers (mma.hpp lines 91, 99) are not shown in five.cu
    assert not [d for d in diagnostics if d.range.start.line in (90, 98)]
    # kernels that were built but not profiled (the fill helpers) get their resource usage
    assert {d.message.split(":")[0] for d in by_code(diagnostics, "resources")} == {
        "fill",
        "fill_half",
    }

    # one job: a fresh progress token, begun cancellable and ended; job status start → end.
    # The job ends after it publishes its diagnostics, so those notifications may trail them.
    await wait_until(
        lambda: (
            client.job_status[-1].phase == "done"
            and all(reports[-1].kind == "end" for reports in client.progress_reports.values())
        )
    )
    (token,) = client.progress_reports
    begin, *_, end = client.progress_reports[token]
    assert begin.kind == "begin" and begin.cancellable is True
    assert end.kind == "end" and end.message.startswith("transpose_naive: memory-bound")
    assert client.job_status[0].running is True
    assert client.job_status[-1].running is False
    assert client.job_status[-1].phase == "done"
    assert client.job_status[-1].uri == uri
    assert "(+4 more kernels)" in client.job_status[-1].message
    assert [run["task"] for run in workspace.runs() if run["event"] == "start"] == ["profile"]


async def test_resources_hint_without_a_profile(client, workspace):
    source = copy_five(workspace)
    response = five_response(source)
    response.profile, response.states = None, []  # as from a run that was never profiled
    workspace.record("harness", response)
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "resources"))
    hints = {d.message.split(":")[0]: d for d in by_code(client.diagnostics[uri], "resources")}
    assert hints["register_hog"].severity == types.DiagnosticSeverity.Hint
    assert hints["register_hog"].message == (
        "register_hog: 56 registers/thread, no spills, 0 B static shared memory, theoretical "
        "occupancy 50% at 256 threads/block (limited by registers)"
    )
    assert hints["register_hog"].range.start.line == 40
    assert not by_code(client.diagnostics[uri], "state")
