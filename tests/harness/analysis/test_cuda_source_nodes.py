"""Property-based: cuda_source finds the definitions of a document with a tree-sitter query
(C) instead of a Python walk over every node, which cost a 5,000-line document ~60 ms more on
the server's event loop; the walk stays here as the oracle. Whatever the source, whole or
broken the way a file is mid-edit, the query finds the same nodes in the same order, and the
kernels, `extern "C"` functions and host functions read from them are the same."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import tree_sitter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelblaster.harness.analysis import cuda_source

REPO = Path(__file__).resolve().parents[3]
NODE_TYPES = ("function_definition", "linkage_specification")

PROPERTY = settings(
    max_examples=400,
    deadline=None,
    database=None,  # nothing written into the checkout; a failure prints its example
    suppress_health_check=[HealthCheck.too_slow],
)


def walked(tree: tree_sitter.Tree, node_type: str) -> list[tree_sitter.Node]:
    """How cuda_source found the nodes before: every node visited depth-first, in source
    order (iterative here, so deep nesting cannot exhaust Python's recursion limit)."""
    found, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == node_type:
            found.append(node)
        stack.extend(reversed(node.children))
    return found


def located(source: str) -> tuple[object, ...]:
    """Everything the module reads out of a source's definitions."""
    return (
        cuda_source.global_kernels(source),
        cuda_source.extern_c_functions(source),
        cuda_source.host_function_names(source),
    )


def assert_same_as_the_walk(source: str) -> None:
    tree = cuda_source.parse(source)
    for node_type in NODE_TYPES:
        assert cuda_source._nodes_of_type(tree, node_type) == walked(tree, node_type), node_type
    found = located(source)
    with mock.patch.object(cuda_source, "_nodes_of_type", walked):
        assert found == located(source)


names = st.sampled_from(["k", "scale", "ns::k", "reduce_sum", "x2", "launch", "é_kernel"])
# Definitions in the forms real files use, each with a NAME to fill in.
FORMS = [
    "__global__ void NAME(float* x, int n) { x[0] = n; }\n",
    "template <typename T, int B>\n__global__ void __launch_bounds__(B, 2) NAME(T* x) { }\n",
    "__global__ void __cluster_dims__(2, (1 + 0), 1) NAME(float* x) { x[0] = 1; }\n",
    "__global__ void __maxnreg__(32) NAME(float* x) { }\n",
    "namespace ns { __global__ void NAME(float*); }\n",
    "template <> __global__ void NAME<float>(float* x) { }\n",
    'extern "C" __global__ void NAME(float* x) { }\n',
    'extern "C" void NAME(const float* __restrict__ x, float** y, int n) { k<<<1, 2>>>(x); }\n',
    'extern "C" {\nvoid NAME(float* y) { }\nint other(int a) { return a; }\n}\n',
    "__device__ float NAME(float a) { return a * 2.0f; }\n",
    "__host__ __device__ inline float NAME(float a) { return a; }\n",
    "static int NAME(int& a, const int* const b) { return a + *b; }\n",
    "struct S { __device__ float operator()(float v) const { return v; } }; // NAME\n",
    "#define NAME_N 4\n#if 0\nvoid hidden() { }\n#endif\n",
    '/* NAME } */ const char* s = "{";  // {\n',
]
definitions = st.builds(
    lambda form, name: form.replace("NAME", name), st.sampled_from(FORMS), names
)
# Definitions also inside other definitions' bodies: a broken file's later code can land there.
sources = st.recursive(
    st.lists(definitions, max_size=6).map("".join),
    lambda inner: st.builds(
        lambda name, body, rest: f"__global__ void {name}(float* x) {{\n{body}}}\n{rest}",
        names,
        inner,
        inner,
    ),
    max_leaves=12,
)
FRAGMENTS = [
    "{", "}", "(", ")", ";", "<", ">", '"', "'", "::", "*/", "/*", "//", "\n", "#if X\n",
    "\n#endif\n", "__global__", 'extern "C"', "template <", "namespace n {", "__global__ void k(",
    "__launch_bounds__(", "__cluster_dims__(1,", "é",
]  # fmt: skip
edits = st.lists(
    st.tuples(
        st.floats(0, 1), st.integers(0, 12), st.sampled_from(["", *FRAGMENTS])
    ),  # where, how much to delete there, what to insert there
    max_size=6,
)


def broken(source: str, changes: list[tuple[float, int, str]]) -> str:
    for where, deleted, inserted in changes:
        at = int(where * len(source))
        source = source[:at] + inserted + source[at + deleted :]
    return source


@PROPERTY
@given(sources)
def test_whole_sources_locate_the_same_as_the_walk(source):
    assert_same_as_the_walk(source)


@PROPERTY
@given(sources, edits)
def test_sources_broken_mid_edit_locate_the_same_as_the_walk(source, changes):
    assert_same_as_the_walk(broken(source, changes))


@pytest.mark.parametrize("kernels", [200])
def test_the_benchmarks_large_documents_locate_the_same_as_the_walk(kernels):
    from bench import kernel_locating as bench

    for variant, text in bench.broken_variants(bench.document(kernels)).items():
        assert len(cuda_source.global_kernels(text)) > kernels // 2, variant
        assert_same_as_the_walk(text)
