"""Nothing the language server starts outlives its reason to run: a superseding save, a cancel
and `shutdown` each end the whole tree (worker, nvcc, cicc) of the job they stop, with the real
harness worker and a slow fake compiler."""

from __future__ import annotations

from lsprotocol import types

from bench.lsp_session import wait_until
from tests.process_leaks import compilers_running, leftovers, none_left, slow_nvcc, wait_for
from tests.server.conftest import open_document, start


def _slow_workspace(workspace, tmp_path):
    source = workspace.add("kernel.cu", "__global__ void k(float* y) { y[0] = 1.0f; }\n")
    settings = {
        "workerCommand": [],  # the real harness worker
        "nvcc": str(slow_nvcc(tmp_path)),
        "arch": "sm_90",
        "cacheDir": str(tmp_path / "cache"),
    }
    return source, settings


def _compile_trees(tmp_path) -> set[int]:
    """The pids of the fake cicc processes now running."""
    return {p.pid for p in leftovers(tmp_path) if "cicc" in p.info["cmdline"]}


async def test_a_newer_save_ends_the_older_compile_and_shutdown_ends_the_rest(
    client, workspace, tmp_path
):
    source, settings = _slow_workspace(workspace, tmp_path)
    await start(client, workspace, **settings)
    uri = open_document(client, source)
    first = await wait_until(lambda: _compile_trees(tmp_path), timeout=60)

    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    await wait_until(lambda: _compile_trees(tmp_path) - first, timeout=60)
    assert wait_for(lambda: not (_compile_trees(tmp_path) & first), timeout=5)

    await client.shutdown_session()
    assert none_left(tmp_path) == []
    # Stopping a job is not an error the user should see.
    assert not [m for m in client.messages if "Error in server" in m.message]


async def test_cancelling_the_progress_ends_the_compile(client, workspace, tmp_path):
    source, settings = _slow_workspace(workspace, tmp_path)
    await start(client, workspace, **settings)
    open_document(client, source)
    await wait_until(lambda: compilers_running(tmp_path), timeout=60)
    token = await wait_until(lambda: next(iter(client.progress_reports), None))

    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    assert wait_for(lambda: not compilers_running(tmp_path), timeout=5)
