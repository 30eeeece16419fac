"""Server test fixtures: a workspace holding a real kernel, recorded worker responses built
from the real ncu fixtures (classified as the worker classifies them), a real KB, and a
pytest-lsp client driving `kernelblaster serve` over stdio (through serve_probe.py, which
records the modules the server imported)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Union

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from bench.lsp_session import (  # the scripted LSP session, shared with bench/lsp.py
    NCU_FIXTURES,
    TIMEOUT_S,
    Workspace,
    wait_until,
)
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import BuildResult, CheckResult, Timing
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.server.editor.documents import path_to_uri

HERE = Path(__file__).resolve().parent
NAIVE3 = NCU_FIXTURES / "h200-naive3"
PROBE = HERE / "serve_probe.py"


def softmax_source() -> str:
    """softmax_rowthread as profiled on the H200 (from the fixture's kernels.py), as a plain .cu."""
    text = (NAIVE3 / "kernels.py").read_text()
    start = text.index("// one thread per row")
    end = text.index("\n\n", start)
    return "#include <cuda_runtime.h>\n#include <math.h>\n\n" + text[start:end] + "\n"


def softmax_response(source: Path) -> WorkerResponse:
    """The H200 report of softmax_rowthread and its measured medians against PyTorch
    (time.json records medians only, so the other percentiles repeat the median)."""
    report = read_report(NAIVE3 / "probe.ncu-rep", depth="full")
    report.kernels = [k for k in report.kernels if k.name == "softmax_rowthread"]
    medians = json.loads((NAIVE3 / "time.json").read_text())["ms"]

    def timing(ms: float) -> Timing:
        return Timing(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, repetitions=50)

    check = CheckResult(
        source=str(source),
        target_kind="plain",
        gpu=report.device,
        arch=report.arch,
        timing=timing(medians["softmax_naive"]),
        eager=timing(medians["softmax_torch"]),
        speedup_vs_eager=medians["softmax_torch"] / medians["softmax_naive"],
    )
    build = BuildResult(ok=True, source=str(source), arch=report.arch)
    return WorkerResponse(build=build, check=check, profile=report, states=classify_report(report))


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest_asyncio.fixture
async def client(tmp_path: Path) -> AsyncIterator[LanguageClient]:
    env = {**os.environ, "KERNELBLASTER_PROBE_MODULES": str(tmp_path / "server-modules.json")}
    env.pop("KERNELBLASTER_KB", None)
    config = ClientServerConfig(server_command=[sys.executable, str(PROBE)], server_env=env)
    lsp = await config.start()
    _fix_code_action_structuring(lsp)
    lsp.job_status = []  # kernelblaster/jobStatus notifications, in order
    lsp.applied_edits = []
    lsp.lens_refreshes = 0  # workspace/codeLens/refresh requests

    @lsp.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(params: None) -> None:
        lsp.lens_refreshes += 1

    @lsp.feature("kernelblaster/jobStatus")
    def job_status(params) -> None:
        lsp.job_status.append(params)

    @lsp.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        lsp.applied_edits.append(params)
        return types.ApplyWorkspaceEditResult(applied=True)

    yield lsp
    await close(lsp)


async def close(lsp: LanguageClient) -> None:
    """Shut the session down and stop the server, within bounds: a server that failed before
    `initialize`, or hangs in `shutdown`, is killed instead of being waited on forever."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(TIMEOUT_S):
            # A test may have shut the session down itself, or the server may be gone.
            if lsp.capabilities is not None and not lsp.stopped:
                await lsp.shutdown_session()
    server = lsp._server
    if server is not None and server.returncode is None:
        server.kill()
    if not lsp.stopped:
        await lsp.stop()


def _fix_code_action_structuring(client: LanguageClient) -> None:
    """lsprotocol's client-side hook reads any `(Command | CodeAction)` that has a "command"
    key as a Command, so a CodeAction carrying a command would arrive mangled; a Command's
    "command" is a string, a CodeAction's an object."""
    converter = client.protocol._converter

    def structure(obj: Any, _: type) -> types.Command | types.CodeAction:
        kind = types.Command if isinstance(obj.get("command"), str) else types.CodeAction
        return converter.structure(obj, kind)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], structure)  # noqa: UP007


async def start(
    client: LanguageClient,
    workspace: Workspace,
    *,
    trusted: bool | None = True,
    **settings: object,
) -> None:
    """initialize and initialized; `trusted` None sends no `trusted` (as the Neovim, Emacs and
    Helix set-ups of docs/other-editors.md don't)."""
    client.set_configuration({"kernelblaster": workspace.settings(**settings)})
    await initialize(
        client,
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=path_to_uri(workspace.root),
            workspace_folders=[types.WorkspaceFolder(uri=path_to_uri(workspace.root), name="ws")],
            initialization_options={} if trusted is None else {"trusted": trusted},
        ),
    )


async def initialize(client: LanguageClient, params: types.InitializeParams) -> None:
    """`initialize_session`, failing at once when the server exits first (pytest-lsp would
    wait for the answer forever) and after TIMEOUT_S when it never answers."""
    assert client._server is not None
    answered = asyncio.ensure_future(client.initialize_session(params))
    exited = asyncio.ensure_future(client._server.wait())
    done, _ = await asyncio.wait(
        {answered, exited}, timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
    )
    if answered not in done:
        answered.cancel()
        exited.cancel()
        why = f"exited with code {exited.result()}" if exited in done else "did not answer"
        raise AssertionError(f"the language server {why} before initialize (see its stderr)")
    exited.cancel()
    answered.result()


def open_document(client: LanguageClient, path: Path, version: int = 1) -> str:
    uri = path_to_uri(path)
    language = "python" if path.suffix == ".py" else "cuda-cpp"
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id=language, version=version, text=path.read_text()
            )
        )
    )
    return uri


def edit_and_save(client: LanguageClient, uri: str, path: Path, text: str, version: int) -> None:
    """The user edits the document to `text` (it becomes `version`) and saves it to `path`."""
    path.write_text(text)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


def by_code(diagnostics, code: str) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.code == code]


async def wait_for_states(
    client: LanguageClient, uri: str, count: int = 1
) -> list[types.Diagnostic]:
    await wait_until(lambda: len(by_code(client.diagnostics.get(uri, []), "state")) >= count)
    return list(client.diagnostics[uri])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
