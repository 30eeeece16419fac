"""Per-folder trust for clients that don't send `trusted` (the Neovim, Emacs and Helix set-ups
of docs/other-editors.md): the server builds and runs a workspace's kernels only when the user
trusted that folder (`kernelblaster trust FOLDER`, the real CLI), never every workspace; a
client that says `trusted: false` (VS Code's Restricted Mode) keeps it untrusted whatever the
list holds. The worker is a canary program (it leaves a marker, then replays a recorded
response); a real pytest-lsp client drives the real server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from bench.lsp_session import Workspace, copy_five, wait_until
from tests.server.conftest import by_code, open_document, start

pytestmark = pytest.mark.usefixtures("own_trust_list")


@pytest.fixture
def own_trust_list(tmp_path, monkeypatch):
    """A private user's trust lists, for this test's server and CLI (before `client` starts)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.delenv("KERNELBLASTER_TRUST_CONFIG", raising=False)


def _canary_worker(workspace: Workspace, marker: Path) -> list[str]:
    """The worker command: a program that leaves `marker`, then replays the recorded answer."""
    script = workspace.control / "canary-worker"
    replay = workspace.settings()["workerCommand"]
    script.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec {" ".join(replay)} "$@"\n')
    script.chmod(0o755)
    return [str(script)]


async def _session(client, workspace: Workspace, marker: Path, trusted: bool | None = None):
    """A session whose worker is the canary; no `trusted` sent unless given."""
    await start(client, workspace, trusted=trusted, workerCommand=_canary_worker(workspace, marker))


def _trust(*args: str) -> str:
    command = [sys.executable, "-m", "kernelblaster", "trust", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _saved(client, source: Path) -> str:
    uri = open_document(client, source)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    return uri


async def test_an_untrusted_folder_runs_nothing(client, workspace, tmp_path):
    marker = tmp_path / "worker-ran"
    source = copy_five(workspace)
    (tmp_path / "elsewhere").mkdir()
    _trust(str(tmp_path / "elsewhere"))  # another folder the user trusts, beside this one
    await _session(client, workspace, marker)
    uri = _saved(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"))
    # No event marks a worker not started: as long as a trusted session takes to start it, and more
    await asyncio.sleep(1.5)
    assert not marker.exists() and workspace.runs() == []
    [message] = [m.message for m in client.messages if "not trusted" in m.message]
    assert "kernelblaster trust FOLDER" in message


async def test_a_folder_trusted_with_the_cli_runs_its_kernels(client, workspace, tmp_path):
    marker = tmp_path / "worker-ran"
    source = copy_five(workspace)
    said = _trust(str(workspace.root))
    assert f"trusted: {workspace.root}/" in said
    await _session(client, workspace, marker)
    uri = _saved(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "state"))
    assert marker.exists() and workspace.runs()


async def test_the_clients_word_wins_over_the_folder_list(client, workspace, tmp_path):
    """VS Code in Restricted Mode says `trusted: false`: nothing runs, listed or not."""
    _trust(str(tmp_path))  # a folder above the workspace: it covers the workspace
    marker = tmp_path / "worker-ran"
    source = copy_five(workspace)
    await _session(client, workspace, marker, trusted=False)
    uri = _saved(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"))
    await asyncio.sleep(1.5)  # as above: no event marks a worker not started
    assert not marker.exists() and workspace.runs() == []


async def test_a_trusted_folders_configuration_edited_after_trust_is_not_used(
    client, workspace, tmp_path
):
    """Trusted with the CLI, the folder's kernelblaster.toml is judged as on the command line:
    a program it names after the trust is refused (and said), the kernels still run."""
    marker = tmp_path / "worker-ran"
    source = copy_five(workspace)
    _trust(str(workspace.root))
    (workspace.root / "kernelblaster.toml").write_text(f"nvcc = '{tmp_path / 'evil-nvcc'}'\n")
    await _session(client, workspace, marker)
    uri = _saved(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "state"))
    [warning] = [m.message for m in client.messages if "configuration file ignored" in m.message]
    assert "nvcc = " in warning and "kernelblaster trust" in warning
    assert marker.exists()


async def test_trust_granted_to_a_running_session_runs_its_open_files(client, workspace, tmp_path):
    """VS Code grants Workspace Trust: `kernelblaster/trustGranted` trusts the running session,
    without a restart (the open files' lenses and diagnostics stay), and runs what it holds."""
    marker = tmp_path / "worker-ran"
    source = copy_five(workspace)
    await _session(client, workspace, marker, trusted=False)
    uri = open_document(client, source)
    (untrusted,) = await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"))
    # about the file: on its first kernel's name (transpose_naive), not on line 1's comment
    assert untrusted.range.start == types.Position(9, 16)
    await asyncio.sleep(1.5)  # as above: no event marks a worker not started
    assert not marker.exists()

    client.protocol.notify("kernelblaster/trustGranted", {})
    diagnostics = await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "state"))
    assert diagnostics and marker.exists()
    assert not by_code(client.diagnostics[uri], "setup")
