"""Interactive work first, through the real language server: a file's save or open is not
queued behind another file's background work (its ncu pass, its baselines), which is stopped
(its worker killed) and resumed once no interactive work waits, its result still published;
a newer save supersedes its own file's work only. The replay worker sends its verification
and timing, says that the rest is background work, then holds until the test releases it, so
the order is certain, not timed."""

from __future__ import annotations

import hashlib
import shutil

from bench.lsp_session import wait_until
from tests.server.conftest import (
    alive,
    by_code,
    edit_and_save,
    open_document,
    softmax_source,
    start,
)
from tests.server.pipeline.test_progressive import verified_softmax

EARLIER = "(profile of an earlier version of this file)"


def profile_runs(workspace, event: str) -> list[dict]:
    """The save pipeline's runs (not builds ahead), with the file each ran."""
    starts = {
        run["pid"]: run
        for run in workspace.runs()
        if run["event"] == "start" and run.get("task") == "profile"
    }
    return [
        {**starts[run["pid"]], "event": event}
        for run in workspace.runs()
        if run["event"] == event and run["pid"] in starts
    ]


def names(runs: list[dict]) -> list[str]:
    return [run["source"].rsplit("/", 1)[-1] for run in runs]


def in_background(client, uri: str) -> bool:
    """The file's job says its run is in its background part."""
    return any(s.uri == uri and "background" in s.message for s in client.job_status[-3:])


def current_state(client, uri: str) -> list:
    """The file's state diagnostics of its current text (its full result has landed)."""
    states = by_code(client.diagnostics.get(uri, []), "state")
    return [d for d in states if EARLIER not in d.message]


async def open_two(client, workspace):
    """softmax.cu and other.cu (the same kernel), the replay worker holding each run once its
    interactive part is done."""
    first = workspace.add("softmax.cu", softmax_source())
    second = workspace.root / "other.cu"
    shutil.copyfile(first, second)
    workspace.record("harness", verified_softmax(first))
    workspace.control_file("progressive")
    await start(client, workspace)
    return first, second


async def test_an_open_is_not_queued_behind_another_files_background_work(client, workspace):
    first, second = await open_two(client, workspace)
    first_uri = open_document(client, first)
    await wait_until(lambda: by_code(client.diagnostics.get(first_uri, []), "timing"))
    await wait_until(lambda: in_background(client, first_uri))
    (held,) = profile_runs(workspace, "start")

    second_uri = open_document(client, second)
    # the second file's interactive work runs now: the first's background work was stopped
    await wait_until(lambda: by_code(client.diagnostics.get(second_uri, []), "timing"))
    await wait_until(lambda: not alive(held["pid"]))
    assert names(profile_runs(workspace, "start")) == ["softmax.cu", "other.cu"]
    assert profile_runs(workspace, "done") == []
    # the first file's timing stays shown meanwhile
    assert by_code(client.diagnostics[first_uri], "timing")

    workspace.control_file("release")  # the second file's background work ends
    await wait_until(lambda: current_state(client, second_uri))
    # then the first file's is resumed (same text) and, released, published
    resumed = await wait_until(lambda: profile_runs(workspace, "start")[2:])
    assert names(resumed) == ["softmax.cu"] and resumed[0]["sha"] == held["sha"]
    workspace.control_file("release")
    await wait_until(lambda: current_state(client, first_uri))
    assert names(profile_runs(workspace, "done")) == ["other.cu", "softmax.cu"]
    await wait_until(lambda: not client.job_status[-1].running)
    ended = {s.uri: s.phase for s in client.job_status if not s.running}
    assert ended == {first_uri: "done", second_uri: "done"}


async def test_a_save_supersedes_its_own_files_work_only(client, workspace):
    first, second = await open_two(client, workspace)
    first_uri = open_document(client, first)
    await wait_until(lambda: in_background(client, first_uri))
    second_uri = open_document(client, second)
    await wait_until(lambda: len(profile_runs(workspace, "start")) == 2)
    await wait_until(lambda: in_background(client, second_uri))
    # the first file's background work waits to resume; the user saves a new text of it
    old_sha = profile_runs(workspace, "start")[0]["sha"]
    edited = "// edited\n" + first.read_text()
    edit_and_save(client, first_uri, first, edited, version=2)

    # its new interactive work stops the second file's background work, not the reverse
    saved = await wait_until(lambda: profile_runs(workspace, "start")[2:])
    assert names(saved) == ["softmax.cu"]
    assert saved[0]["sha"] == hashlib.sha256(edited.encode()).hexdigest() != old_sha
    await wait_until(lambda: in_background(client, first_uri))
    workspace.control_file("release")
    await wait_until(lambda: current_state(client, first_uri))
    # the second file's background work resumes and is published; the first file's old
    # text is never run again
    resumed = await wait_until(lambda: profile_runs(workspace, "start")[3:])
    assert names(resumed) == ["other.cu"]
    workspace.control_file("release")
    await wait_until(lambda: current_state(client, second_uri))
    first_runs = [run for run in profile_runs(workspace, "start") if "softmax" in run["source"]]
    assert [run["sha"] for run in first_runs] == [old_sha, saved[0]["sha"]]
    assert names(profile_runs(workspace, "done")) == ["softmax.cu", "other.cu"]
    (state,) = current_state(client, first_uri)
    assert state.range.start.line == 5  # the saved text's kernel, one line lower
