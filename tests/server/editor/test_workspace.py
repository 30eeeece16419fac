"""Trust, settings, the no-LLM path, bad input, and the server's own process (no torch)."""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from bench.lsp_session import copy_five, wait_until
from kernelblaster.server.session.jobs import DEBOUNCE_S as JOB_DEBOUNCE_S
from tests.server.conftest import by_code, open_document, start, wait_for_states


async def test_untrusted_workspace_runs_nothing_and_explains_once(client, workspace):
    source = copy_five(workspace)
    other = workspace.add("other.cu", "__global__ void k(float* x) { x[0] = 1.f; }\n")
    await start(client, workspace, trusted=False)
    uri = open_document(client, source)
    open_document(client, other)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"))
    (setup,) = by_code(client.diagnostics[uri], "setup")
    assert setup.message == "Not built or run: the workspace is not trusted."
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.optimize",
            arguments=[{"uri": uri, "kernel": "transpose_naive", "technique": None, "version": 1}],
        )
    )
    assert result["applied"] is False and "not trusted" in result["message"]
    explained = [m for m in client.messages if "this workspace is not trusted" in m.message]
    # once for the saves and opens, once more as the answer to the explicit command
    assert len(explained) == 2
    assert "run `kernelblaster trust FOLDER` once for it" in explained[0].message
    assert workspace.runs() == []


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    """The server's per-user data folder (where its default KB goes), private to the test."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    return tmp_path / "data-home"


async def test_an_untrusted_workspace_chooses_no_path_or_program(data_home, client, workspace):
    chosen = workspace.root / "chosen"
    workspace.add(
        "kernelblaster.toml",
        f'kb_path = "{chosen}/KB_FROM_WORKSPACE.sqlite3"\ncache_dir = "{chosen}/cache"\n'
        f'nvcc = "{chosen}/evil-nvcc"\n',
    )
    source = copy_five(workspace)
    await start(client, workspace, trusted=False, kbPath=None)
    uri = open_document(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"))
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="kernelblaster.knowledgeBase", arguments=[])
    )
    assert not chosen.exists()  # no KB, cache or anything else where the workspace chose
    assert list(data_home.rglob("*.sqlite3"))  # the KB is the user's own
    assert not [m for m in client.messages if "evil-nvcc" in m.message]


async def test_without_an_llm_endpoint_the_action_says_what_to_configure(client, workspace):
    source = copy_five(workspace)
    await start(client, workspace, llmBaseUrl=None)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(10, 0), types.Position(10, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    optimize = [a for a in actions if a.command.command == "kernelblaster.optimize"]
    assert optimize and all(a.disabled is not None for a in optimize)
    assert "set kernelblaster.llmBaseUrl" in optimize[0].disabled.reason
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.optimize", arguments=optimize[0].command.arguments
        )
    )
    assert result["applied"] is False
    assert result["message"].startswith(
        "Optimizing needs an LLM endpoint: set kernelblaster.llmBaseUrl"
    )
    assert "OPENAI_API_KEY" in result["message"]
    assert [r for r in workspace.runs() if "kernel" in r] == []  # no optimize worker spawned


async def test_configuration_changes_apply_without_a_restart(client, workspace):
    source = copy_five(workspace)
    await start(client, workspace, topK=3, bogusKey=1)
    await wait_until(lambda: client.messages)
    assert "unknown setting kernelblaster.bogusKey (ignored)" in client.messages[0].message
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)

    async def titles() -> list[str]:
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(types.Position(10, 0), types.Position(10, 0)),
                context=types.CodeActionContext(diagnostics=[]),
            )
        )
        return [a.title for a in actions]

    assert len(await titles()) == 4  # three techniques and "Optimize kernel"
    client.set_configuration({"kernelblaster": workspace.settings(topK=1, rollouts="many")})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_until(lambda: any("rollouts" in m.message for m in client.messages))
    assert "kernelblaster.rollouts = 'many' ignored" in client.messages[-1].message
    assert len(await titles()) == 2


def saves(workspace) -> list[dict]:
    """The save pipeline's runs (not the builds ahead of a save)."""
    return [r for r in workspace.runs() if r["event"] == "start" and r["task"] != "build"]


async def test_a_setting_the_harness_reads_reruns_the_open_files_and_others_do_not(
    client, workspace
):
    source = copy_five(workspace)
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    assert len(saves(workspace)) == 1

    def reconfigure(**settings: object) -> None:
        client.set_configuration({"kernelblaster": workspace.settings(**settings)})
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    reconfigure(topK=1, codeLens=False)  # the editor's own: nothing to build again
    await asyncio.sleep(4 * JOB_DEBOUNCE_S)  # no event marks a rerun not scheduled
    assert len(saves(workspace)) == 1
    reconfigure(topK=1, codeLens=False, nvccFlags=["-O3"])
    await wait_until(lambda: len(saves(workspace)) == 2)


async def test_malformed_requests_and_unknown_files_do_not_crash_the_server(client, workspace):
    source = copy_five(workspace)
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    position = types.Position(9, 20)

    unknown = types.TextDocumentIdentifier(uri="file:///nowhere/missing.cu")
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=unknown, position=position)
    )
    assert hover is None
    readme = workspace.add("notes.txt", "not cuda")
    open_document(client, readme)
    text_uri = types.TextDocumentIdentifier(uri=readme.as_uri())
    assert (
        await client.text_document_hover_async(
            types.HoverParams(text_document=text_uri, position=position)
        )
        is None
    )
    untitled = types.TextDocumentIdentifier(uri="untitled:Untitled-1")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=untitled,
            range=types.Range(position, position),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert list(actions or []) == []
    # a position past the end of the document
    far = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(9999, 5)
        )
    )
    assert far is None
    for command, arguments in (
        ("kernelblaster.optimize", [{"uri": uri}]),
        ("kernelblaster.optimize", ["not an object"]),
        ("kernelblaster.optimize", []),
        ("kernelblaster.showDiff", [{"uri": uri, "kernel": 3}]),
        ("kernelblaster.profile", [{"uri": "file:///nowhere/readme.md"}]),
        ("kernelblaster.profile", [{"uri": uri, "depth": "deep"}]),
    ):
        with pytest.raises(JsonRpcInvalidParams):
            await client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=command, arguments=arguments)
            )
    # requests whose params don't match the method, and a body that isn't JSON at all
    send_raw(
        client, {"jsonrpc": "2.0", "id": 90001, "method": "textDocument/hover", "params": {"x": 1}}
    )
    send_raw(
        client, {"jsonrpc": "2.0", "id": 90002, "method": "textDocument/codeAction", "params": []}
    )
    send_raw(client, {"jsonrpc": "2.0", "method": "textDocument/didSave", "params": {"uri": 5}})
    client.protocol.writer.write(b"Content-Length: 9\r\n\r\n{not json")
    # still serving
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
    )
    assert "transpose_naive" in hover.contents.value
    kb = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="kernelblaster.knowledgeBase", arguments=[])
    )
    assert kb["kb"]["summary"]["techniques"] >= 30 and kb["kb"]["entries"] == []
    assert [k["kernel"] for k in kb["workspace"]["kernels"]][:1] == ["transpose_naive"]


def send_raw(client, message: dict) -> None:
    """Write a JSON-RPC message as-is, bypassing the client's typed serializer."""
    body = json.dumps(message).encode()
    client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


async def test_server_process_imports_neither_torch_nor_agents(client, workspace, tmp_path):
    """The editor's process stays light: a full open → save → diagnostics → hover cycle loads
    no torch and nothing of the LLM side (agents/), which it reaches only through workers."""
    source = copy_five(workspace)
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_for_states(client, uri, count=5)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    # the save's job ran the worker again and published its result
    await wait_until(lambda: sum(status.phase == "done" for status in client.job_status) >= 2)
    assert sum(run["event"] == "done" for run in workspace.runs()) >= 2
    await wait_for_states(client, uri, count=5)
    await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(9, 20)
        )
    )
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="kernelblaster.knowledgeBase", arguments=[])
    )
    await client.shutdown_session()
    client.capabilities = None
    loaded = json.loads((tmp_path / "server-modules.json").read_text())
    assert not [name for name in loaded if name.split(".")[0] == "torch"], loaded
    assert not [name for name in loaded if name.startswith("kernelblaster.agents")], loaded
