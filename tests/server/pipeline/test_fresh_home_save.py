"""The language server on a new user's machine (issue 42): HOME and the XDG folders point at
folders that do not exist yet, the real harness worker builds on save, and the editor gets
the build's diagnostics with the cache made; where the cache can't be made, one setup
diagnostic names the folder and the fix, and the server keeps running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsprotocol import types

from bench.lsp_session import wait_until
from tests.server.conftest import by_code, open_document, start

pytestmark = pytest.mark.nvcc
KERNEL = (
    "#include <cuda_runtime.h>\n__global__ void scale(float* x, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] *= 2.0f;\n}\n"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A home made by nobody, in the environment the `client` fixture starts the server with
    (it is asked for before `client`, so the server inherits it)."""
    home = tmp_path / "home"
    for name in [n for n in os.environ if n.startswith(("KERNELBLASTER_", "XDG_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    return home


async def test_a_save_on_a_fresh_home_builds_and_makes_the_cache(home, client, workspace):
    source = workspace.add("scale.cu", KERNEL)
    await start(client, workspace, workerCommand=[])  # the real harness worker
    uri = open_document(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "resources"), 120)
    (resources,) = by_code(client.diagnostics[uri], "resources")
    assert "registers" in resources.message
    assert (home / ".cache" / "kernelblaster" / "builds").is_dir()


async def test_a_cache_that_cannot_be_made_is_one_setup_diagnostic(home, client, workspace):
    home.mkdir()
    (home / ".cache").write_text("a file where the cache should be")
    source = workspace.add("scale.cu", KERNEL)
    await start(client, workspace, workerCommand=[])
    uri = open_document(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"), 120)
    (setup,) = by_code(client.diagnostics[uri], "setup")
    assert setup.severity == types.DiagnosticSeverity.Warning
    assert f"{home / '.cache'} is a file, not a folder" in setup.message
    assert f"Remove {home / '.cache'}, or: Set cache_dir" in setup.message
    assert setup.data == {"kind": "setup_path"}
