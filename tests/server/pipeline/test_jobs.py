"""Per-file jobs: a newer save cancels the running job (its worker is killed), a crashed worker
becomes a diagnostic and the next save works, and changes made outside the editor are seen."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types

from bench.lsp_session import copy_five, wait_until
from kernelblaster.server.session.jobs import DEBOUNCE_S as JOB_DEBOUNCE_S
from tests.server.conftest import alive, by_code, open_document, start, wait_for_states


def started(workspace) -> list[dict]:
    """The save pipeline's runs (not the builds ahead of a save)."""
    return [run for run in workspace.runs() if run["event"] == "start" and run["task"] != "build"]


def finished(workspace) -> list[int]:
    runs = {run["pid"] for run in started(workspace)}
    return [run["pid"] for run in workspace.runs() if run["event"] == "done" and run["pid"] in runs]


def save(client, uri: str) -> None:
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


async def test_save_during_a_running_job_cancels_it(client, workspace):
    source = copy_five(workspace)
    workspace.control_file("delay_once", "60")
    await start(client, workspace)
    uri = open_document(client, source)
    (first,) = await wait_until(lambda: started(workspace))

    # the user inserts two lines at the top and saves while the first job is still profiling
    source.write_text("// edited\n// again\n" + source.read_text())
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=source.read_text())],
        )
    )
    save(client, uri)
    diagnostics = await wait_for_states(client, uri, count=5)

    first_pid, second = first["pid"], started(workspace)[1]
    assert not alive(first_pid)  # killed, not left running on the GPU
    assert finished(workspace) == [second["pid"]]
    assert first["sha"] != second["sha"]  # the second job profiled the saved text
    # only the second job's diagnostics: the kernels sit two lines lower
    transpose = next(d for d in by_code(diagnostics, "state") if "transpose_naive" in d.message)
    assert transpose.range.start.line == 11
    # the end notifications of the second job (status, then progress) may trail its diagnostics
    await wait_until(
        lambda: (
            (client.job_status[-1].running, client.job_status[-1].phase) == (False, "done")
            and all(reports[-1].kind == "end" for reports in client.progress_reports.values())
        )
    )
    # the file stayed running from the first job's start to the second's end: the superseded
    # job's end is not a status of its own
    phases = [(s.running, s.phase) for s in client.job_status]
    assert [p for p in phases if not p[0]] == [(False, "done")] and phases[-1] == (False, "done")
    # each job had its own progress token; the cancelled one was ended too
    assert len(client.progress_reports) == 2
    assert all(reports[-1].kind == "end" for reports in client.progress_reports.values())
    assert "cancelled" in [r[-1].message for r in client.progress_reports.values()]


async def test_crashed_worker_yields_a_diagnostic_and_the_next_save_works(client, workspace):
    source = copy_five(workspace)
    workspace.control_file("crash_once")
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "run"))
    (crash,) = by_code(client.diagnostics[uri], "run")
    assert crash.severity == types.DiagnosticSeverity.Error
    assert crash.message.startswith(
        "The worker died during build (killed by SIGSEGV) without a result"
    )
    assert crash.data == {"kind": "crash"}
    # about the whole file: on its first kernel's name (transpose_naive), not on line 1's comment
    assert crash.range.start == types.Position(9, 16)

    save(client, uri)
    diagnostics = await wait_for_states(client, uri, count=5)
    assert not by_code(diagnostics, "run")
    assert len(started(workspace)) == 2


@pytest.mark.parametrize("companion", ["five.py", "five.cpp"])  # its reference, its bindings
async def test_companion_changed_outside_the_editor_reruns_the_job(client, workspace, companion):
    source = copy_five(workspace)
    reference = workspace.add(companion, "// written\n")
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    assert len(started(workspace)) == 1

    client.diagnostics.pop(uri)
    reference.write_text("// regenerated\n")
    await wait_for_states(client, uri, count=5)
    assert len(started(workspace)) == 2


async def test_unchanged_kernel_file_touched_outside_the_editor_is_not_rerun(client, workspace):
    source = copy_five(workspace)
    other = workspace.add("other.cu", source.read_text())
    await start(client, workspace)
    uri, other_uri = open_document(client, source), open_document(client, other)
    await wait_for_states(client, uri, count=5)
    await wait_for_states(client, other_uri, count=5)
    assert len(started(workspace)) == 2
    source.write_text(source.read_text())  # same content: e.g. a checkout of the same commit
    # other.cu changed after it: other.cu's rerun starts after five.cu's change was looked at
    other.write_text(other.read_text() + "\n// appended by a generator\n")
    await wait_until(lambda: len(started(workspace)) == 3)
    assert [Path(run["source"]).name for run in started(workspace)][2:] == ["other.cu"]
    # a changed kernel file is rerun
    source.write_text(source.read_text() + "\n// appended by a generator\n")
    await wait_until(lambda: len(started(workspace)) == 4)


async def test_a_file_closed_as_soon_as_opened_runs_nothing(client, workspace):
    """The close comes while the open is still reading the file's history and cached result:
    the open must not start a job for a file that is no longer open (on a GPU: a whole build,
    verification and profile ahead of the other files' saves)."""
    source = copy_five(workspace)
    await start(client, workspace)
    uri = open_document(client, source)
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    # No event marks an open that decided to run nothing: waited past the debounce instead.
    await asyncio.sleep(3 * JOB_DEBOUNCE_S)
    assert started(workspace) == []
    assert client.job_status == []

    # opened again, it runs as usual
    open_document(client, source)
    await wait_for_states(client, uri, count=5)
    assert len(started(workspace)) == 1


async def test_a_save_superseding_a_queued_job_leaves_the_file_shown_as_running(client, workspace):
    """Another file holds the GPU; this file's job waits for it and the user saves again: the
    superseded job's end must not be the file's last status (the status bar would show it idle,
    "cancelled", while its new job waits)."""
    source = copy_five(workspace)
    other = workspace.root / "other.cu"
    other.write_text(source.read_text())
    workspace.control_file("delay_once", "60")
    await start(client, workspace)
    open_document(client, other)
    await wait_until(lambda: started(workspace))  # holds the GPU for a minute
    uri = open_document(client, source)
    await wait_until(lambda: [s for s in client.job_status if s.uri == uri])

    save(client, uri)
    await wait_until(lambda: len([s for s in client.job_status if s.uri == uri]) >= 2)
    # Its progress (a token per job) is ended all the same, after any status the job sends.
    ended = await wait_until(
        lambda: [r for r in client.progress_reports.values() if r[-1].kind == "end"]
    )
    assert len(ended) == 1 and ended[0][-1].message == "cancelled"
    mine = [s for s in client.job_status if s.uri == uri]
    assert (mine[-1].running, mine[-1].phase) == (True, "queued")
    assert not [s for s in mine if not s.running]
