"""`kernelblaster.optimize` / `showDiff`: the (replay) optimize worker's verified candidate is
applied against the document version it started from, refused onto a changed document, and
the run can be cancelled through its progress token."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled

from bench.lsp_session import copy_five, wait_until
from kernelblaster.harness.protocol.optimize_protocol import OptimizeResult
from kernelblaster.harness.protocol.records import SanitizerRun
from kernelblaster.server.editor.documents import path_to_uri
from tests.server.conftest import alive, open_document, start, wait_for_states

FASTER_TRANSPOSE = "// transpose through a shared-memory tile (verified candidate)\n"


MEMCHECK_PASSED = SanitizerRun(
    status="passed",
    tools=["memcheck", "racecheck"],
    inputs="get_inputs() at batch_size 32 instead of 512",
    seconds=2.1,
)


def record_candidate(
    workspace, source: Path, sanitizer: SanitizerRun | None = MEMCHECK_PASSED
) -> str:
    best = source.read_text().replace("// 1. Naive transpose", FASTER_TRANSPOSE + "// 1. Naive")
    workspace.record(
        "optimize",
        OptimizeResult(
            kernel="transpose_naive",
            improved=True,
            best_source=best,
            speedup=2.4,
            techniques=["shared_memory_tiling"],
            sanitizer=sanitizer,
        ),
    )
    return best


def execute_optimize(
    client, uri: str, version: int, technique: str | None = "shared_memory_tiling"
):
    return client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.optimize",
            arguments=[
                {
                    "uri": uri,
                    "kernel": "transpose_naive",
                    "technique": technique,
                    "version": version,
                }
            ],
        )
    )


def optimize_runs(workspace) -> list[dict]:
    return [r for r in workspace.runs() if r["event"] == "start" and "kernel" in r]


async def open_five_with_a_candidate(client, workspace, **settings) -> tuple[Path, str, str]:
    """five.cu opened once its 5 kernels have states, with the optimize worker's verified
    candidate recorded: its path, the candidate's text and its uri."""
    source = copy_five(workspace)
    best = record_candidate(workspace, source)
    await start(client, workspace, **settings)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    return source, best, uri


async def test_optimize_applies_the_verified_candidate_against_its_version(client, workspace):
    source, best, uri = await open_five_with_a_candidate(client, workspace, rollouts=2, depth=1)

    result = await execute_optimize(client, uri, version=1)
    assert result == {
        "applied": True,
        "message": "transpose_naive 2.40× faster (shared_memory_tiling); compute-sanitizer "
        "memcheck, racecheck passed on get_inputs() at batch_size 32 instead of 512.",
    }
    assert not [m for m in client.messages if m.type == types.MessageType.Warning]
    (run,) = optimize_runs(workspace)
    assert run["technique"] == "shared_memory_tiling" and run["rollouts"] == 2 and run["depth"] == 1
    (applied,) = client.applied_edits
    (change,) = applied.edit.document_changes
    assert change.text_document.uri == uri and change.text_document.version == 1
    (edit,) = change.edits
    assert edit.new_text == best
    lines = source.read_text().split("\n")
    assert edit.range == types.Range(
        types.Position(0, 0), types.Position(len(lines) - 1, len(lines[-1]))
    )
    # the candidate is kept beside the source, and "Show diff" opens it
    candidate = source.parent / ".kernelblaster" / "candidates" / "five.transpose_naive.best.cu"
    assert candidate.read_text() == best
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(11, 0), types.Position(11, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    show = actions[-1]
    assert show.title == "Show diff: best verified transpose_naive (2.40×)"
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=show.command.command, arguments=show.command.arguments)
    )
    assert [d.uri for d in client.shown_documents] == [path_to_uri(candidate)]
    # its progress: one token, begun cancellable, with the worker's step, then ended
    reports = [r for rs in client.progress_reports.values() for r in rs if r.kind == "report"]
    assert any("rollout 1 step 1 (replay)" in (r.message or "") for r in reports)


async def test_a_candidate_not_checked_for_memory_errors_is_applied_with_a_warning(
    client, workspace
):
    """The candidate compute-sanitizer could not check (the machine's reason) is offered all
    the same, and the editor says so: a warning with why and the fix, in the notification
    (window/showMessage) and in the command's answer."""
    source = copy_five(workspace)
    not_run = SanitizerRun(
        status="not_run",
        reason="compute-sanitizer could not be started (/opt/cuda/bin/compute-sanitizer: "
        "No such file or directory).",
        fix="Install the CUDA toolkit's compute-sanitizer.",
    )
    record_candidate(workspace, source, sanitizer=not_run)
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    result = await execute_optimize(client, uri, version=1)
    assert result["applied"] is True
    assert result["warning"] == not_run.summary
    assert result["message"].endswith(f"; {not_run.summary}.")
    warning = next(m for m in client.messages if m.type == types.MessageType.Warning)
    assert warning.message == f"transpose_naive: {not_run.summary}"
    assert len(client.applied_edits) == 1


async def test_an_edit_is_refused_onto_a_document_that_changed(client, workspace):
    source, _, uri = await open_five_with_a_candidate(client, workspace)

    workspace.control_file("delay_once", "3")
    running = asyncio.ensure_future(execute_optimize(client, uri, version=1))
    await wait_until(lambda: optimize_runs(workspace))
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="// typing\n")],
        )
    )
    result = await running
    assert result["applied"] is False
    assert result["message"].startswith(
        "Not applied: five.cu changed while optimizing transpose_naive (started from version 1, "
        "now version 2)."
    )
    assert client.applied_edits == []
    assert client.messages[-1].type == types.MessageType.Warning
    assert client.messages[-1].message == result["message"]
    assert (
        source.parent / ".kernelblaster" / "candidates" / "five.transpose_naive.best.cu"
    ).exists()

    # an action offered for version 1 is refused at once now that the document is at version 2
    stale = await execute_optimize(client, uri, version=1)
    assert stale["applied"] is False and "changed since this action was offered" in stale["message"]
    assert len(optimize_runs(workspace)) == 1


async def test_cancelling_the_progress_token_kills_the_optimize_worker(client, workspace):
    _, _, uri = await open_five_with_a_candidate(client, workspace)
    jobs_before = set(client.progress_reports)

    workspace.control_file("delay_once", "60")
    running = asyncio.ensure_future(execute_optimize(client, uri, version=1, technique=None))
    (run,) = await wait_until(lambda: optimize_runs(workspace))
    (token,) = await wait_until(lambda: set(client.progress_reports) - jobs_before)
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(running, timeout=10)

    assert result == {"applied": False, "message": "Optimizing transpose_naive was cancelled."}
    assert run["technique"] is None
    assert client.progress_reports[token][-1].kind == "end"
    assert client.applied_edits == []
    await wait_until(lambda: not alive(run["pid"]))


async def test_cancelling_the_request_kills_the_optimize_worker(client, workspace):
    """`$/cancelRequest` of the command (what editors send when the user gives up on it), not
    only its progress token: the worker dies and nothing is applied."""
    _, _, uri = await open_five_with_a_candidate(client, workspace)

    workspace.control_file("delay_once", "5")
    request_id = "optimize-to-cancel"
    running = asyncio.ensure_future(
        client.protocol.send_request_async(
            types.WORKSPACE_EXECUTE_COMMAND,
            types.ExecuteCommandParams(
                command="kernelblaster.optimize",
                arguments=[{"uri": uri, "kernel": "transpose_naive", "version": 1}],
            ),
            msg_id=request_id,
        )
    )
    (run,) = await wait_until(lambda: optimize_runs(workspace))
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=request_id))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wait_for(running, timeout=10)
    await wait_until(lambda: not alive(run["pid"]), timeout=2)  # dead: it answers nothing now
    assert [r for r in workspace.runs() if r["event"] == "done" and r["pid"] == run["pid"]] == []
    assert client.applied_edits == []


async def test_shutdown_during_an_optimize_ends_its_worker_and_answers(client, workspace):
    _, _, uri = await open_five_with_a_candidate(client, workspace)

    workspace.control_file("delay_once", "60")
    running = asyncio.ensure_future(execute_optimize(client, uri, version=1))
    (run,) = await wait_until(lambda: optimize_runs(workspace))
    await client.shutdown_async(None)  # answered, not an error

    assert not alive(run["pid"])  # ended before shutdown was answered
    with pytest.raises(JsonRpcRequestCancelled):
        await running
    assert client.applied_edits == []
    assert not [m for m in client.log_messages if "internal error" in m.message]
    client.exit(None)
    await asyncio.wait_for(client._server.wait(), timeout=10)
    await client.stop()
