"""Build ahead on edit (server/session/build_ahead.py) through a real LSP client: an edit's unsaved
text is built when typing pauses, so that saving it finds the build in the cache; a newer edit
kills the older build, a save of other text cancels it, a save that comes with its edit
starts it at once, and the `buildOnChange` setting turns it off. The nvcc tests run the real
worker and the real nvcc (through a script that logs each compile); the others the replay
worker. That an unsaved text's errors and line table name the file is tested on the build
itself (tests/harness/worker/test_build_unsaved.py)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time
from pathlib import Path

import msgspec
import psutil
import pytest
from lsprotocol import types
from pytest_lsp import client_capabilities

from bench.lsp_session import Workspace, copy_five, wait_until
from kernelblaster.server.editor.documents import path_to_uri
from kernelblaster.server.results.cache import FileResult
from tests.server.conftest import alive, initialize, open_document, start

NVCC_TIMEOUT_S = 240.0  # nvcc and torch's import on 2 shared cores

SCALE = Path(__file__).resolve().parents[2] / "fixtures" / "cuda" / "scale_with_header"
HEADER = (SCALE / "scale.cuh").read_text()  # scaled(v): FACTOR * v
KERNEL = (SCALE / "scale.cu").read_text()  # FACTOR defined, then scale.cuh included
EDITED = KERNEL.replace("#define FACTOR 2.0f", "#define FACTOR 3.0f")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def change(client, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def save(client, uri: str) -> None:
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


# --- the real worker and nvcc ----------------------------------------------------------------


class CountedNvcc:
    """A `nvcc` setting that logs its command lines (but `--version`) and runs the real nvcc."""

    def __init__(self, root: Path) -> None:
        self.log = root / "nvcc-compiles.log"
        self.path = root / "nvcc"
        self.path.write_text(
            "#!/bin/sh\n"
            'case "$*" in *--version*) ;; *) echo "$*" >> ' + f'"{self.log}" ;; esac\n'
            f'exec "{shutil.which("nvcc")}" "$@"\n'
        )
        self.path.chmod(0o755)

    def compiles(self) -> int:
        """nvcc runs on scale.cu (or a copy of its unsaved text): one each, its steps listed
        (`--dryrun`) to be run split or step by step (harness/build/nvcc_steps.py); the
        worker also builds its own CUPTI helper with it."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return sum(line.removesuffix(" --dryrun").endswith("/scale.cu") for line in lines)


def saved_result(cache_dir: Path, text: str) -> FileResult | None:
    """The server's saved result of scale.cu for `text`, if it has one."""
    for path in cache_dir.glob("scale.cu-*.json"):
        result = msgspec.json.decode(path.read_bytes(), type=FileResult)
        if result.text_hash == sha(text):
            return result
    return None


async def open_real(client, workspace: Workspace, tmp_path: Path) -> tuple[str, Path, CountedNvcc]:
    """scale.cu (with scale.cuh from its own folder) opened with the real worker; returns once
    the open's run has built and saved its result."""
    workspace.add("scale.cuh", HEADER)
    source = workspace.add("scale.cu", KERNEL)
    nvcc = CountedNvcc(tmp_path)
    settings = workspace.settings(nvcc=str(nvcc.path), arch="sm_90", cacheDir=str(tmp_path))
    del settings["workerCommand"]  # the real `python -m kernelblaster.harness.worker`
    client.set_configuration({"kernelblaster": settings})
    await initialize(
        client,
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=path_to_uri(workspace.root),
            initialization_options={"trusted": True},
        ),
    )
    uri = open_document(client, source)
    await wait_until(lambda: saved_result(tmp_path, KERNEL), timeout=NVCC_TIMEOUT_S)
    assert nvcc.compiles() == 1
    return uri, source, nvcc


def stored_builds(cache_dir: Path) -> int:
    builds = cache_dir / "builds"
    return sum(1 for entry in builds.iterdir() if entry.name != "manifests" and entry.is_dir())


@pytest.mark.nvcc
async def test_a_save_after_its_build_ahead_finds_the_build_cached(client, workspace, tmp_path):
    uri, source, nvcc = await open_real(client, workspace, tmp_path)
    change(client, uri, EDITED, version=2)
    # the edit's build, stored in the cache, while the file still holds the old text
    await wait_until(lambda: stored_builds(tmp_path) == 2, timeout=NVCC_TIMEOUT_S)
    assert source.read_text() == KERNEL
    assert nvcc.compiles() == 2

    source.write_text(EDITED)
    save(client, uri)
    result = await wait_until(lambda: saved_result(tmp_path, EDITED), timeout=NVCC_TIMEOUT_S)
    built = result.response.build
    assert built.ok and built.cached
    assert built.source == str(source)
    assert nvcc.compiles() == 2  # the save ran no nvcc of its own


@pytest.mark.nvcc
async def test_a_save_during_its_build_ahead_waits_for_it(client, workspace, tmp_path):
    uri, source, nvcc = await open_real(client, workspace, tmp_path)
    change(client, uri, EDITED, version=2)
    await wait_until(lambda: nvcc.compiles() == 2, timeout=NVCC_TIMEOUT_S)  # nvcc has started
    source.write_text(EDITED)
    save(client, uri)
    result = await wait_until(lambda: saved_result(tmp_path, EDITED), timeout=NVCC_TIMEOUT_S)
    assert result.response.build.ok and result.response.build.cached
    assert nvcc.compiles() == 2


# --- the replay worker ---------------------------------------------------------------------


def runs(workspace: Workspace, event: str, task: str | None = None) -> list[dict]:
    return [
        run
        for run in workspace.runs()
        if run["event"] == event and (task is None or run.get("task") == task)
    ]


def finished(workspace: Workspace, run: dict) -> bool:
    return any(done["pid"] == run["pid"] for done in runs(workspace, "done"))


async def open_replayed(client, workspace: Workspace, **settings: object) -> tuple[str, Path]:
    source = copy_five(workspace)
    await start(client, workspace, **settings)
    uri = open_document(client, source)
    await wait_until(lambda: runs(workspace, "done"))  # the open's run
    return uri, source


async def test_a_newer_edit_kills_the_older_build_ahead(client, workspace):
    uri, source = await open_replayed(client, workspace)
    first, second = source.read_text() + "// one\n", source.read_text() + "// two\n"
    workspace.control_file("delay_once", "60")
    change(client, uri, first, version=2)
    (older,) = await wait_until(lambda: runs(workspace, "start", "build"))
    assert older["sha"] == sha(first) and older["source"] == str(source)
    change(client, uri, second, version=3)
    await wait_until(lambda: not alive(older["pid"]))
    newer = await wait_until(lambda: runs(workspace, "start", "build")[1:])
    assert newer[0]["sha"] == sha(second)
    await wait_until(lambda: finished(workspace, newer[0]))
    assert not finished(workspace, older)


async def test_the_first_edit_is_built_in_a_worker_started_when_the_file_was_opened(
    client, workspace
):
    """Not one started at the edit, whose Python start-up would eat the pause's head start."""
    uri, source = await open_replayed(client, workspace)
    await asyncio.sleep(1.0)  # the worker started at the open is a second old at the edit
    workspace.control_file("delay_once", "60")  # keeps it alive to be looked at
    edited = time.time()
    change(client, uri, source.read_text() + "// edited\n", version=2)
    (ahead,) = await wait_until(lambda: runs(workspace, "start", "build"))
    assert psutil.Process(ahead["pid"]).create_time() < edited - 0.5


async def test_a_save_of_other_text_cancels_the_build_ahead(client, workspace):
    uri, source = await open_replayed(client, workspace)
    edited = source.read_text() + "// edited\n"
    workspace.control_file("delay_once", "60")
    change(client, uri, edited, version=2)
    (ahead,) = await wait_until(lambda: runs(workspace, "start", "build"))
    # another program wrote the file: what is saved is not the text being built
    source.write_text(source.read_text() + "// written elsewhere\n")
    save(client, uri)
    await wait_until(lambda: not alive(ahead["pid"]))
    saved = await wait_until(lambda: runs(workspace, "start", "profile")[1:])
    assert saved[0]["sha"] == sha(source.read_text())
    assert not finished(workspace, ahead)


async def test_an_edit_saved_at_once_is_built_ahead_from_the_save(client, workspace):
    """The edit and its save together (the typing pause not over): the build ahead starts at
    the save instead of being dropped, beside the save's wait for the GPU."""
    uri, source = await open_replayed(client, workspace)
    edited = source.read_text() + "// edited\n"
    change(client, uri, edited, version=2)
    source.write_text(edited)
    save(client, uri)
    (ahead,) = await wait_until(lambda: runs(workspace, "start", "build"))
    assert ahead["sha"] == sha(edited)
    await wait_until(lambda: finished(workspace, ahead))
    saved = await wait_until(lambda: runs(workspace, "start", "profile")[1:])
    assert saved[0]["sha"] == sha(edited)


async def test_nothing_is_built_ahead_when_build_on_change_is_off(client, workspace):
    uri, source = await open_replayed(client, workspace, buildOnChange=False)
    edited = source.read_text() + "// edited\n"
    change(client, uri, edited, version=2)
    # No event marks a build not started: well past the pause after which it would have
    await asyncio.sleep(1.0)
    source.write_text(edited)
    save(client, uri)
    await wait_until(lambda: len(runs(workspace, "done")) == 2)
    assert [run["task"] for run in runs(workspace, "start")] == ["profile", "profile"]


async def test_a_header_builds_nothing_ahead(client, workspace):
    await open_replayed(client, workspace)
    header_uri = open_document(client, workspace.add("five.cuh", "#pragma once\n"))
    change(client, header_uri, "#pragma once\n// edited\n", version=2)
    await asyncio.sleep(1.0)  # well past the pause: no event marks a build not started
    assert runs(workspace, "start", "build") == []


async def test_an_untrusted_workspace_builds_nothing_ahead(client, workspace):
    source = copy_five(workspace)
    await start(client, workspace, trusted=False)
    uri = open_document(client, source)
    change(client, uri, source.read_text() + "// edited\n", version=2)
    await asyncio.sleep(1.0)  # well past the pause: no event marks a build not started
    assert workspace.runs() == []
