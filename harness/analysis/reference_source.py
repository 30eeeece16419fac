"""A Python file read as a KernelBench-style reference from its text alone, never imported, so the
language server can ask: where its `class Model`, `get_inputs()` and `get_init_inputs()` are, what
it lacks, and whether it is a solution (`class ModelNew`)."""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

DEFINITIONS = ("Model", "get_inputs", "get_init_inputs")
REFERENCE_FORMAT = (
    "A reference defines class Model(nn.Module) with forward(), get_inputs() returning the "
    "forward inputs, and get_init_inputs() returning Model's constructor arguments "
    "(KernelBench format)."
)
_WANTED = {("class", "Model"), ("def", "get_inputs"), ("def", "get_init_inputs")}
_SOLUTION = "ModelNew"
# Files that mention none of these at the start of a line are not parsed at all: the editor
# asks about every Python file the user opens.
_MENTIONS = re.compile(r"^(?:class\s+Model|def\s+get_(?:init_)?inputs)\b", re.MULTILINE)


class Definition(NamedTuple):
    name: str  # one of DEFINITIONS
    first_line: int  # 0-based, its decorators included
    last_line: int  # 0-based, inclusive


class ReferenceOutline(NamedTuple):
    definitions: list[Definition]  # those the file has, in file order
    solution: bool  # it defines ModelNew: a KernelBench solution, not a problem

    @property
    def missing(self) -> list[str]:
        present = {d.name for d in self.definitions}
        return [name for name in DEFINITIONS if name not in present]

    @property
    def is_problem(self) -> bool:
        return not self.missing and not self.solution

    def at(self, line: int) -> Definition | None:
        """The definition holding the 0-based `line`, if any."""
        return next((d for d in self.definitions if d.first_line <= line <= d.last_line), None)


def outline(text: str) -> ReferenceOutline | None:
    """The reference definitions `text` makes at top level; None for a file that makes none of
    them (any other Python file) or does not parse."""
    if _MENTIONS.search(text) is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the source
        return None
    definitions, solution = [], False
    for node in tree.body:
        if not isinstance(node, ast.ClassDef | ast.FunctionDef):
            continue
        kind = "class" if isinstance(node, ast.ClassDef) else "def"
        solution = solution or (kind, node.name) == ("class", _SOLUTION)
        if (kind, node.name) in _WANTED:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            last = node.end_lineno or node.lineno
            definitions.append(Definition(node.name, first - 1, last - 1))
    if not definitions and not solution:
        return None
    return ReferenceOutline(definitions, solution)


def describe_missing(file_name: str, missing: list[str]) -> str:
    """Why `file_name` can't be a reference, and how to make it one."""
    named = [f"class {n}" if n == "Model" else f"{n}()" for n in missing]
    return f"{file_name} is not a KernelBench-style reference: it lacks {', '.join(named)}. " + (
        REFERENCE_FORMAT
    )


# KernelBench's name for the leading dimension of get_inputs()' tensors, a module constant
BATCH_SIZE = "batch_size"


def batch_size_of(text: str) -> int | None:
    """The value of the reference's one top-level `batch_size = <int>`; None when it has none,
    assigns it more than once or from a non-literal: then only running it would tell, and no copy
    with another batch size can be written."""
    assignment = _batch_assignment(text)
    return None if assignment is None else assignment.value


def with_batch_size(text: str, batch_size: int) -> str | None:
    """`text` with its `batch_size = <int>` set to `batch_size`, everything else as written (so
    what the file derives from it follows); None where `batch_size_of` finds none."""
    assignment = _batch_assignment(text)
    if assignment is None:
        return None
    lines = text.splitlines(keepends=True)
    line = lines[assignment.line]
    lines[assignment.line] = line[: assignment.start] + str(batch_size) + line[assignment.end :]
    return "".join(lines)


class _Assignment(NamedTuple):
    value: int
    line: int  # 0-based, the literal's
    start: int  # the literal's columns on it (character offsets)
    end: int


def _batch_assignment(text: str) -> _Assignment | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: list[ast.AST] = []
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == BATCH_SIZE for t in targets):
            found.append(node)
    if len(found) != 1 or not isinstance(found[0], ast.Assign) or len(found[0].targets) != 1:
        return None
    value = found[0].value
    if not (isinstance(value, ast.Constant) and type(value.value) is int):
        return None
    if value.end_lineno != value.lineno or value.end_col_offset is None:
        return None
    # ast's columns are UTF-8 byte offsets: a line with non-ASCII text before the literal
    line = text.splitlines(keepends=True)[value.lineno - 1].encode("utf-8")
    start = len(line[: value.col_offset].decode("utf-8"))
    end = len(line[: value.end_col_offset].decode("utf-8"))
    return _Assignment(value.value, value.lineno - 1, start, end)
