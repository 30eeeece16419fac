"""On a GPU machine: the server, driven by an LSP client, profiles a real example on open with
the real harness worker and publishes state and line diagnostics from real ncu data. The
published diagnostics are written to $KERNELBLASTER_GPU_DIAGNOSTICS (if set) for the record."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from lsprotocol import types

from tests.conftest import REPO
from tests.server.conftest import by_code, open_document, start, wait_until


@pytest.mark.gpu
async def test_profiles_softmax_on_open_and_publishes_real_diagnostics(client, workspace):
    for name in ("softmax.cu", "softmax.py"):
        shutil.copyfile(REPO / "examples" / name, workspace.root / name)
    await start(client, workspace, workerCommand=None)  # the real worker: build, verify, time, ncu
    uri = open_document(client, workspace.root / "softmax.cu")
    await wait_until(
        lambda: (
            by_code(client.diagnostics.get(uri, []), "state")
            or by_code(client.diagnostics.get(uri, []), "setup")
            or by_code(client.diagnostics.get(uri, []), "run")
        ),
        timeout=600,
    )
    diagnostics = client.diagnostics[uri]
    if out := os.environ.get("KERNELBLASTER_GPU_DIAGNOSTICS"):
        with open(out, "w") as handle:
            json.dump(
                [client.protocol._converter.unstructure(d) for d in diagnostics], handle, indent=1
            )
    (state, *_) = by_code(diagnostics, "state")
    assert state.message.startswith("softmax")
    assert " ms" in state.message and "vs eager" in state.message
    assert [d for d in diagnostics if d.range.start.line != state.range.start.line], diagnostics
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]
