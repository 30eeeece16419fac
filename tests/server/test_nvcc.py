"""The real harness worker behind the server: nvcc's errors become diagnostics at their lines,
and a fixed file builds clean (needs nvcc; the GPU steps report what they can)."""

from __future__ import annotations

import pytest
from lsprotocol import types

from tests.server.conftest import edit_and_save, open_document, wait_until

BROKEN = """#include <cuda_runtime.h>

__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * undefined_factor;
}
"""


@pytest.mark.nvcc
async def test_real_worker_reports_nvcc_errors_at_their_lines(client, workspace):
    source = workspace.add("scale.cu", BROKEN)
    settings = workspace.settings()
    del settings["workerCommand"]  # the real `python -m kernelblaster.harness.worker`
    # a minimal client (no workspace/configuration, no progress): settings come with initialize
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=workspace.root.as_uri(),
            initialization_options={"trusted": True, "settings": settings},
        )
    )
    uri = open_document(client, source)
    await wait_until(lambda: client.diagnostics.get(uri), timeout=120)
    errors = [d for d in client.diagnostics[uri] if d.severity == types.DiagnosticSeverity.Error]
    (error,) = errors
    assert error.message == 'identifier "undefined_factor" is undefined'
    assert error.range.start == types.Position(4, 29)  # nvcc's line 5, column 30
    assert error.range.end == types.Position(
        4, len("    if (i < n) x[i] = x[i] * undefined_factor;")
    )

    fixed = BROKEN.replace("undefined_factor", "2.0f")
    edit_and_save(client, uri, source, fixed, version=2)
    await wait_until(
        lambda: any(d.code in ("resources", "state") for d in client.diagnostics.get(uri, [])),
        timeout=120,
    )
    diagnostics = client.diagnostics[uri]
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]
    kernel = next(d for d in diagnostics if d.code in ("resources", "state"))
    assert kernel.message.startswith("scale: ")
    assert kernel.range.start == types.Position(2, 16)
