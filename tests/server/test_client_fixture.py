"""The test client itself: a server that dies before `initialize`, or a test that fails before
starting the session, ends its test at once instead of hanging the suite in teardown (a
fresh clone without fixtures once hung `pytest` forever in `LanguageClient.stop()`)."""

from __future__ import annotations

import sys
import time

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from tests.server.conftest import PROBE, close, initialize


async def test_a_server_that_dies_before_initialize_fails_fast():
    config = ClientServerConfig(
        server_command=[sys.executable, "-c", "import sys; sys.exit('no fixtures here')"]
    )
    lsp = await config.start()
    began = time.monotonic()
    with pytest.raises((AssertionError, RuntimeError), match=r"exited|stopped"):
        await initialize(
            lsp, types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
        )
    await close(lsp)
    assert time.monotonic() - began < 10


async def test_teardown_of_a_session_never_initialized_stops_the_server(tmp_path):
    env = {"KERNELBLASTER_PROBE_MODULES": str(tmp_path / "modules.json")}
    lsp = await ClientServerConfig(
        server_command=[sys.executable, str(PROBE)], server_env=env
    ).start()
    server = lsp._server
    began = time.monotonic()
    await close(lsp)  # the server is alive and waiting for `initialize`
    assert server.returncode is not None
    assert time.monotonic() - began < 10
