"""The real harness worker behind the server: nvcc's errors become diagnostics at their lines,
and a fixed file builds clean (needs nvcc; the GPU steps report what they can)."""

from __future__ import annotations

import pytest
from lsprotocol import types

from bench.lsp_session import wait_until
from kernelblaster.server.editor.documents import path_to_uri
from tests.server.conftest import by_code, edit_and_save, open_document, start

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


SCOPED_AND_TEMPLATED = """#include <cuda_runtime.h>

namespace {
__global__ void halve(float* x) { x[threadIdx.x] *= 0.5f; }
}  // namespace

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) reverse(float* x) {
    __shared__ float tile[BLOCK];
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = tile[BLOCK - 1 - threadIdx.x];
}

extern "C" void launch(float* x) {
    halve<<<1, 32>>>(x);
    reverse<128><<<1, 128>>>(x);
    reverse<1024><<<1, 1024>>>(x);
}
"""


@pytest.mark.nvcc
async def test_real_worker_resources_for_anonymous_namespace_and_each_instantiation(
    client, workspace
):
    # ptxas names them "(anonymous namespace)::halve(float*)" and "void reverse<128>(float*)":
    # the first used to get no resource usage at all, the second only its first instantiation's.
    source = workspace.add("scoped.cu", SCOPED_AND_TEMPLATED)
    settings = workspace.settings()
    del settings["workerCommand"]
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=workspace.root.as_uri(),
            initialization_options={"trusted": True, "settings": settings},
        )
    )
    uri = open_document(client, source)
    await wait_until(
        lambda: len([d for d in client.diagnostics.get(uri, []) if d.code == "resources"]) == 2,
        timeout=120,
    )
    hints = {d.message.split(":")[0]: d for d in client.diagnostics[uri] if d.code == "resources"}
    assert hints["halve"].range.start == types.Position(3, 16)
    assert hints["halve"].message.startswith("halve: ")
    assert "registers/thread" in hints["halve"].message
    first, *per_instantiation = hints["reverse"].message.splitlines()
    assert first == "reverse: compiled as 2 kernels"
    assert sorted(line.split(":")[0] for line in per_instantiation) == [
        "reverse<1024>(float*)",
        "reverse<128>(float*)",
    ]
    small = next(line for line in per_instantiation if line.startswith("reverse<128>"))
    large = next(line for line in per_instantiation if line.startswith("reverse<1024>"))
    assert "512 B static shared memory" in small and "at 128 threads/block" in small
    assert "4096 B static shared memory" in large and "at 1024 threads/block" in large

    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(7, 42)
        )
    )
    assert hover is not None
    assert "- `reverse<128>(float*)`: " in hover.contents.value
    assert "- `reverse<1024>(float*)`: " in hover.contents.value


@pytest.mark.nvcc
async def test_fixing_the_nvcc_setting_builds_again_without_a_save(client, workspace):
    source = workspace.add("scale.cu", BROKEN.replace("undefined_factor", "2.0f"))
    # workerCommand []: the real `python -m kernelblaster.harness.worker`
    await start(client, workspace, workerCommand=[], nvcc=str(workspace.root / "no-such-nvcc"))
    uri = open_document(client, source)
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "setup"), timeout=120)
    assert "nvcc not found" in by_code(client.diagnostics[uri], "setup")[0].message

    # back to the nvcc on PATH
    client.set_configuration({"kernelblaster": workspace.settings(workerCommand=[])})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_until(lambda: by_code(client.diagnostics.get(uri, []), "resources"), timeout=120)
    assert not [d for d in client.diagnostics[uri] if "nvcc not found" in d.message]


@pytest.mark.nvcc
async def test_real_error_in_an_included_header_is_at_the_include_line(client, workspace):
    header = workspace.add(
        "util.cuh", "#pragma once\n__device__ inline float twice(float v) { return v * missing; }\n"
    )
    source = workspace.add(
        "scale.cu",
        "#include <cuda_runtime.h>\n// the header's error shows here:\n"
        '#include "util.cuh"\n'
        "__global__ void scale(float* x) { x[0] = twice(x[0]); }\n",
    )
    await start(client, workspace, workerCommand=[])  # the real harness worker
    uri = open_document(client, source)
    await wait_until(lambda: client.diagnostics.get(uri), timeout=120)
    (error,) = [d for d in client.diagnostics[uri] if d.severity == types.DiagnosticSeverity.Error]
    column = len("__device__ inline float twice(float v) { return v * ") + 1
    assert error.message == f'util.cuh:2:{column}: identifier "missing" is undefined'
    assert error.range.start == types.Position(2, 0)
    assert error.range.end == types.Position(2, len('#include "util.cuh"'))
    (related,) = error.related_information or []
    assert related.location.uri == path_to_uri(header)
    assert related.location.range.start == types.Position(1, column - 1)


@pytest.mark.nvcc
async def test_real_error_with_a_known_remedy_says_it(client, workspace):
    source = workspace.add(
        "dp.cu",
        "__global__ void child(float* p) { p[threadIdx.x] = 1.0f; }\n"
        "__global__ void parent(float* p) { child<<<1, 32>>>(p); }\n",
    )
    await start(client, workspace, workerCommand=[])  # the real harness worker
    uri = open_document(client, source)
    await wait_until(lambda: client.diagnostics.get(uri), timeout=120)
    (error,) = [d for d in client.diagnostics[uri] if d.severity == types.DiagnosticSeverity.Error]
    assert error.range.start.line == 1
    first, fix = error.message.split("\n")
    assert "requires separate compilation mode" in first
    assert fix.startswith('Add "-rdc=true" to nvcc_flags in kernelblaster.toml')
