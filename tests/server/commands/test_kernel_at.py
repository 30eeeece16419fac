"""`kernelblaster.kernelAt`: which kernel "Optimize Kernel at Cursor" means, answered by the
server's tree-sitter locator (the client has no CUDA parser of its own)."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from kernelblaster.server.editor.documents import path_to_uri
from tests.server.conftest import open_document, start

TWO_KERNELS = """#include <cuda_runtime.h>
// __global__ void commented(float* x) {}

template <typename T>
__global__ void __launch_bounds__(256, 2)
scale_kernel(const T* __restrict__ x,
             T* y, int n) {
  if (threadIdx.x < n) { y[threadIdx.x] = 2 * x[threadIdx.x]; }
}

__device__ float helper(float v) { return v * 2.0f; }

extern "C" __global__ void add_one(float* x) {
  /* { unbalanced in a comment */
  x[threadIdx.x] += 1.0f;
}

extern "C" void launch(float* x) {
  add_one<<<1, 32>>>(x);
}
"""
# Lines (0-based): scale_kernel 4..8 (name on 5), helper 10, add_one 12..15, launch 17..19.


async def kernel_at(client, uri: str, line: int, character: int = 0):
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.kernelAt",
            arguments=[{"uri": uri, "position": {"line": line, "character": character}}],
        )
    )


@pytest.fixture
async def two_kernels(client, workspace):
    source = workspace.add("two.cu", TWO_KERNELS)
    await start(client, workspace, trusted=False)  # nothing runs: only the document matters
    return open_document(client, source)


async def test_the_kernel_whose_definition_holds_the_cursor(client, two_kernels):
    inside = await kernel_at(client, two_kernels, 7, 10)
    assert inside == {
        "kernel": "scale_kernel",
        "range": {
            "start": {"line": 5, "character": 0},
            "end": {"line": 5, "character": len("scale_kernel")},
        },
        "kernels": ["scale_kernel", "add_one"],
    }
    assert (await kernel_at(client, two_kernels, 4))["kernel"] == "scale_kernel"  # __global__
    assert (await kernel_at(client, two_kernels, 14, 3))["kernel"] == "add_one"


async def test_outside_any_kernel_the_nearest_one_above(client, two_kernels):
    # In the __device__ helper after scale_kernel, and in the launcher after add_one.
    assert (await kernel_at(client, two_kernels, 10, 5))["kernel"] == "scale_kernel"
    below = await kernel_at(client, two_kernels, 18, 2)
    assert below["kernel"] == "add_one"
    assert below["range"]["start"] == {"line": 12, "character": len('extern "C" __global__ void ')}


async def test_above_several_kernels_the_user_chooses(client, two_kernels):
    # Line 1 is a comment naming a kernel that does not exist: the parser is not fooled.
    for line in (0, 1, 3):
        assert await kernel_at(client, two_kernels, line) == {
            "kernel": None,
            "range": None,
            "kernels": ["scale_kernel", "add_one"],
        }


async def test_a_single_kernel_is_meant_from_anywhere(client, workspace):
    source = workspace.add("one.cu", "\n\n__global__ void only(float* x) { x[0] = 1.f; }\n")
    await start(client, workspace, trusted=False)
    uri = open_document(client, source)
    assert (await kernel_at(client, uri, 0))["kernel"] == "only"


async def test_no_kernel_and_bad_requests(client, workspace):
    plain = workspace.add("plain.cu", "int main() { return 0; }\n")
    await start(client, workspace, trusted=False)
    uri = open_document(client, plain)
    assert await kernel_at(client, uri, 0) == {"kernel": None, "range": None, "kernels": []}
    closed = workspace.add("closed.cu", "__global__ void k() {}\n")
    with pytest.raises(JsonRpcInvalidParams, match=r"closed\.cu is not open"):
        await kernel_at(client, path_to_uri(closed), 0)
    with pytest.raises(JsonRpcInvalidParams, match="kernelAt"):
        await client.workspace_execute_command_async(
            types.ExecuteCommandParams(
                command="kernelblaster.kernelAt",
                arguments=[{"uri": uri, "position": {"line": -1, "character": 0}}],
            )
        )
