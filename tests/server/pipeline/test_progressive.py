"""Progressive results through the real language server: the verified timing is published
while the profile still runs (the replay worker holds its profile until the test releases it,
so the order is certain, not timed), an earlier version's profile stays pinned to its kernel
meanwhile, the worker's in-process counters' state is shown before ncu's source lines land,
and a profile that fails after the timing leaves the timing shown with its error."""

from __future__ import annotations

import asyncio

import msgspec
from lsprotocol import types

from bench.lsp_session import wait_until
from kernelblaster.harness.protocol.records import HarnessError, VerifyResult
from tests.server.conftest import (
    by_code,
    edit_and_save,
    open_document,
    softmax_response,
    softmax_source,
    start,
    wait_for_states,
)

EARLIER = "(profile of an earlier version of this file)"


def verified_softmax(source):
    """The softmax fixture's response, verified on three input sets as the worker does."""
    response = softmax_response(source)
    response.check.verify = VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, seeds=[1, 2, 3])
    return response


def _timing(client, uri: str) -> list[types.Diagnostic]:
    return by_code(client.diagnostics.get(uri, []), "timing")


async def open_held_at_its_profile(client, workspace) -> str:
    """Open softmax.cu; its run sends its timing, then holds until a `release` file."""
    source = workspace.add("softmax.cu", softmax_source())
    workspace.record("harness", verified_softmax(source))
    workspace.control_file("progressive")
    await start(client, workspace)
    return open_document(client, source)


async def test_timing_is_published_before_the_profile_lands(client, workspace):
    uri = await open_held_at_its_profile(client, workspace)

    (timing,) = await wait_until(lambda: _timing(client, uri))
    # the profile has not landed: no state yet, and the speedups are not measured yet
    assert not by_code(client.diagnostics[uri], "state")
    assert timing.message == "verified on 3 fresh input sets; 0.481 ms per call (median of 50 runs)"
    assert timing.range.start.line == 4  # softmax_rowthread's name
    assert timing.severity == types.DiagnosticSeverity.Information
    # the status bar says so too (its notification may trail the diagnostics), without the
    # file's name, which the client shows beside it
    timed = "verified on 3 fresh input sets; 0.481 ms per call (median of 50 runs); "
    status = await wait_until(
        lambda: next((s for s in client.job_status if s.message.startswith(timed)), None)
    )
    assert status.running and not by_code(client.diagnostics[uri], "state")

    workspace.control_file("release")
    diagnostics = await wait_for_states(client, uri)
    (state,) = by_code(diagnostics, "state")
    assert EARLIER not in state.message and "0.10× vs eager" in state.message
    (timing,) = by_code(diagnostics, "timing")
    assert (
        timing.message
        == "verified on 3 fresh input sets; 0.481 ms per call (median of 50 runs), 0.10× vs eager"
    )
    await wait_until(lambda: not client.job_status[-1].running)
    assert client.job_status[-1].phase == "done"


async def test_an_earlier_profile_stays_pinned_and_a_failed_profile_keeps_the_timing(
    client, workspace
):
    source = workspace.add("softmax.cu", softmax_source())
    response = verified_softmax(source)
    workspace.record("harness", response)
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri)

    # the next run verifies and times, then its profile fails
    failed = msgspec.structs.replace(
        response,
        profile=None,
        states=[],
        error=HarnessError(
            kind="counter_permission",
            message="ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM).",
            fix="Allow profiling for all users.",
        ),
    )
    workspace.record("harness", failed)
    workspace.control_file("progressive")
    edit_and_save(client, uri, source, "// edited\n" + source.read_text(), version=2)

    # the edit alone republishes the earlier state one line lower, without a timing; the new
    # run's timing then joins it there
    await wait_until(lambda: [d for d in _timing(client, uri) if d.range.start.line == 5])
    # while the new profile runs: the new timing, and the earlier state pinned to its kernel
    diagnostics = client.diagnostics[uri]
    (timing,) = by_code(diagnostics, "timing")
    (state,) = by_code(diagnostics, "state")
    assert timing.range.start.line == state.range.start.line == 5  # one line lower now
    assert "vs eager" not in state.message  # the earlier profile's, not the new check's
    assert not [d for d in diagnostics if d.range.start.line != 5]  # no stale line findings
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(5, 20)
        )
    )
    assert "From the profile of an earlier version of this file" in hover.contents.value

    workspace.control_file("release")
    await wait_until(lambda: by_code(client.diagnostics[uri], "setup"))
    diagnostics = client.diagnostics[uri]
    (error,) = by_code(diagnostics, "setup")
    assert error.data == {"kind": "counter_permission"}
    (timing,) = by_code(diagnostics, "timing")
    assert timing.message.endswith("0.10× vs eager")
    (state,) = by_code(diagnostics, "state")
    assert state.message.endswith(EARLIER)


async def test_a_job_cancelled_during_its_profile_keeps_its_timing(client, workspace):
    uri = await open_held_at_its_profile(client, workspace)
    await wait_until(lambda: _timing(client, uri))

    (token,) = client.progress_reports
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    await wait_until(lambda: client.job_status[-1].phase == "cancelled")
    assert not [r for r in workspace.runs() if r["event"] == "done"]  # its profile never landed
    assert _timing(client, uri) and not by_code(client.diagnostics[uri], "state")
    # the server still holds the verified timing: hover shows it
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(4, 20)
        )
    )
    assert "| per call, whole target (median of 50 runs) | 0.481 ms |" in hover.contents.value


async def test_the_in_process_state_is_shown_before_ncus_pass_lands(client, workspace):
    source = workspace.add("softmax.cu", softmax_source())
    final = verified_softmax(source)
    workspace.record("harness", final)
    # what the in-process counters give: the same kernel and metrics, without ncu's source
    # markers and rule results, and a summary of its own so the test can tell the two apart
    early = msgspec.structs.replace(final)
    early.profile = msgspec.structs.replace(final.profile, program="in_process")
    early.profile.kernels = [
        msgspec.structs.replace(kernel, markers=[], rules=[]) for kernel in final.profile.kernels
    ]
    early.states = [
        msgspec.structs.replace(state, summary="memory-bound (in-process counters)", findings=[])
        for state in final.states
    ]
    workspace.record("early", early)
    workspace.control_file("progressive")
    await start(client, workspace)
    uri = open_document(client, source)

    (state,) = await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "state"))
    assert state.message.startswith("softmax_rowthread: memory-bound (in-process counters) — ")
    assert EARLIER not in state.message
    assert client.job_status[-1].running  # ncu's pass has not landed
    assert sorted(d.code for d in client.diagnostics[uri]) == ["state", "timing"]
    # the KB ranks the early state (in the background): hover offers its optimizations
    params = types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(4, 20)
    )
    for _ in range(100):
        hover = await client.text_document_hover_async(params)
        if "Optimizations ranked by the knowledge base" in hover.contents.value:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the early state was never ranked: {hover.contents.value}")
    assert client.job_status[-1].running

    workspace.control_file("release")
    await wait_until(lambda: not client.job_status[-1].running)
    (state,) = by_code(client.diagnostics[uri], "state")
    # ncu's profile replaced it, with the findings only its pass has
    assert state.message.startswith(f"softmax_rowthread: {final.states[0].summary}")
    assert "use 4 of 32 bytes per sector" in state.message
