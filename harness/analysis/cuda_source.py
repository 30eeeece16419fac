"""CUDA source structure from the tree-sitter-cuda grammar: `__global__` kernels, the `extern "C"`
launchers of plain targets, the host functions of an extension's kernels file. tree-sitter recovers
from errors, so the editor can locate kernels in a file that doesn't compile."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import msgspec
import tree_sitter
import tree_sitter_cuda


class CParam(msgspec.Struct, kw_only=True):
    name: str
    type: str  # as written, without the name, e.g. "const float* __restrict__"
    base_type: str  # e.g. "float", "__half", "int64_t", "unsigned int", "cudaStream_t"
    pointer: bool
    const: bool


class CFunction(msgspec.Struct, kw_only=True):
    name: str
    return_type: str
    params: list[CParam]
    line: int  # 1-based line of the declaration


class KernelDecl(msgspec.Struct, kw_only=True):
    """A `__global__` function: where its name is and where its definition spans (0-based, as
    LSP counts; columns in UTF-8 bytes, which equal characters for ASCII source)."""

    name: str
    name_line: int
    name_start_column: int
    name_end_column: int
    start_line: int
    end_line: int


def read_source(path: Path) -> str:
    """A source file's text. nvcc accepts any bytes in comments and strings, so a stray
    Latin-1 byte must not make the file unreadable here: undecodable bytes become U+FFFD."""
    return path.read_text(encoding="utf-8", errors="replace")


@cache
def _language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_cuda.language())


@cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(_language())


# Kernel attributes tree-sitter-cuda 0.21 doesn't know: it reads `__global__ void
# __cluster_dims__(2, 1, 1) k(...)` as a declaration of `__cluster_dims__`, missing the kernel.
# They say nothing of a kernel's place or name, so they are blanked out.
_UNKNOWN_ATTRIBUTES = re.compile(
    r"\b(?:__cluster_dims__|__maxnreg__|__block_size__)\s*\((?:[^()]|\([^()]*\))*\)"
)


def _blank(match: re.Match[str]) -> str:
    """Spaces for the match's bytes (newlines kept), so every position after it stays put."""
    return "".join(c if c == "\n" else " " * len(c.encode("utf-8")) for c in match.group(0))


def parse(source: str) -> tree_sitter.Tree:
    return _parser().parse(_UNKNOWN_ATTRIBUTES.sub(_blank, source).encode("utf-8"))


@cache
def _query(node_type: str) -> tree_sitter.Query:
    return tree_sitter.Query(_language(), f"({node_type}) @node")


def _nodes_of_type(tree: tree_sitter.Tree, node_type: str) -> list[tree_sitter.Node]:
    """Every `node_type` node of the tree (ERROR nodes of a broken file included) in source order,
    enclosing before enclosed. A query runs in C: ~8 ms where a Python walk took ~60 ms on a
    4,750-line file (bench/kernel_locating.py); its captures come back unordered, hence the
    sort."""
    found = tree_sitter.QueryCursor(_query(node_type)).captures(tree.root_node).get("node", [])
    return sorted(found, key=lambda node: (node.start_byte, -node.end_byte))


def _text(node: tree_sitter.Node | None) -> str:
    return node.text.decode("utf-8") if node is not None and node.text is not None else ""


def _declarator_name(declarator: tree_sitter.Node | None) -> tuple[str, int]:
    """The identifier inside a (possibly pointer/reference) declarator, and its pointer depth."""
    depth = 0
    node = declarator
    while node is not None and node.type in ("pointer_declarator", "reference_declarator"):
        depth += 1
        node = node.child_by_field_name("declarator") or next(
            (c for c in node.children if c.type.endswith("declarator") or c.type == "identifier"),
            None,
        )
    return _text(node), depth


def _param(node: tree_sitter.Node) -> CParam | None:
    type_node = node.child_by_field_name("type")
    declarator = node.child_by_field_name("declarator")
    if type_node is None:
        return None
    name, depth = _declarator_name(declarator)
    qualifiers = [_text(c) for c in node.children if c.type == "type_qualifier"]
    full = _text(node)
    type_text = full[: len(full) - len(name)].rstrip() if name and full.endswith(name) else full
    return CParam(
        name=name,
        type=type_text,
        base_type=_text(type_node),
        pointer=depth > 0,
        const="const" in qualifiers,
    )


def _function(definition: tree_sitter.Node) -> CFunction | None:
    declarator = definition.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    if declarator is None:
        return None
    params_node = declarator.child_by_field_name("parameters")
    params = [
        p
        for p in (
            _param(c)
            for c in (params_node.children if params_node else [])
            if c.type == "parameter_declaration"
        )
        if p is not None
    ]
    return CFunction(
        name=_text(declarator.child_by_field_name("declarator")),
        return_type=_text(definition.child_by_field_name("type")),
        params=params,
        line=definition.start_point[0] + 1,
    )


def extern_c_functions(source: str) -> list[CFunction]:
    """Functions defined with C linkage (`extern "C" ...` or inside `extern "C" { ... }`)."""
    found: list[CFunction] = []
    for node in _nodes_of_type(parse(source), "linkage_specification"):
        if '"C"' not in _text(node.child_by_field_name("value")):
            continue
        body = node.child_by_field_name("body")
        definitions = (
            [body]
            if body is not None and body.type == "function_definition"
            else [c for c in (body.children if body else []) if c.type == "function_definition"]
        )
        found.extend(f for f in map(_function, definitions) if f is not None)
    return found


def _unqualified(name: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """The bare name in a declarator's name: `k` of `ns::k`, of an explicit specialization's
    `k<float>` and of `ns::k<64>` (the name ptxas, ncu and the launch sites use)."""
    while name is not None and name.type in ("qualified_identifier", "template_function"):
        name = name.child_by_field_name("name")
    return name


def global_kernels(source: str) -> list[KernelDecl]:
    """Every `__global__` function definition, in source order."""
    kernels: list[KernelDecl] = []
    for node in _nodes_of_type(parse(source), "function_definition"):
        if not any(_text(c) == "__global__" for c in node.children):
            continue
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        name_node = _unqualified(
            declarator.child_by_field_name("declarator") if declarator else None
        )
        if name_node is None:
            continue
        kernels.append(
            KernelDecl(
                name=_text(name_node),
                name_line=name_node.start_point[0],
                name_start_column=name_node.start_point[1],
                name_end_column=name_node.end_point[1],
                start_line=node.start_point[0],
                end_line=node.end_point[0],
            )
        )
    return kernels


def host_function_names(source: str) -> list[str]:
    """The functions defined for the host (neither `__global__` nor only `__device__`), in
    source order, as named there (`ns::f` for a definition outside its namespace)."""
    names: list[str] = []
    for node in _nodes_of_type(parse(source), "function_definition"):
        qualifiers = {_text(c) for c in node.children}
        if "__global__" in qualifiers or (
            "__device__" in qualifiers and "__host__" not in qualifiers
        ):
            continue
        function = _function(node)
        if function is not None:
            names.append(function.name)
    return names


def kernel_names(path: Path) -> list[str]:
    """The `__global__` kernels a target file defines, in source order: a .cu file's own, or
    those in the CUDA strings of a KernelBench solution (what its load_inline compiles)."""
    text = read_source(path)
    if path.suffix != ".py":
        return [k.name for k in global_kernels(text)]
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []  # importing the solution reports the syntax error, with its line
    names: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "__global__" in node.value
        ):
            names.extend(k.name for k in global_kernels(node.value) if k.name not in names)
    return names
