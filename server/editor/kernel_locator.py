"""Where the `__global__` kernels of a document are, and which one encloses a position.

Parsing is harness.cuda_source's (tree-sitter-cuda, tolerant of broken code); this adds LSP
ranges in Python characters and a small cache keyed by the text, so hover and code actions
don't re-parse an unchanged document."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from lsprotocol import types

from kernelblaster.harness.analysis.cuda_source import global_kernels


@dataclass(frozen=True)
class KernelSpan:
    name: str
    name_range: types.Range  # the kernel's name in its `__global__` declaration
    definition: types.Range  # from the declaration's first line to the closing brace's line

    def contains(self, line: int) -> bool:
        return self.definition.start.line <= line <= self.definition.end.line


def _char_column(line: str, byte_column: int) -> int:
    return len(line.encode("utf-8")[:byte_column].decode("utf-8", errors="replace"))


@lru_cache(maxsize=128)
def locate(text: str) -> tuple[KernelSpan, ...]:
    lines = text.splitlines() or [""]
    spans = []
    for decl in global_kernels(text):
        name_line = lines[decl.name_line] if decl.name_line < len(lines) else ""
        end_line = min(decl.end_line, len(lines) - 1)
        spans.append(
            KernelSpan(
                name=decl.name,
                name_range=types.Range(
                    types.Position(decl.name_line, _char_column(name_line, decl.name_start_column)),
                    types.Position(decl.name_line, _char_column(name_line, decl.name_end_column)),
                ),
                definition=types.Range(
                    types.Position(decl.start_line, 0),
                    types.Position(end_line, len(lines[end_line])),
                ),
            )
        )
    return tuple(spans)


def enclosing(spans: tuple[KernelSpan, ...], line: int) -> KernelSpan | None:
    return next((span for span in spans if span.contains(line)), None)


def by_name(spans: tuple[KernelSpan, ...], name: str) -> KernelSpan | None:
    return next((span for span in spans if span.name == name), None)


def kernel_meant(spans: tuple[KernelSpan, ...], line: int) -> KernelSpan | None:
    """The kernel a command run at `line` is about: the one whose definition encloses it, else
    the nearest one defined above it (e.g. the cursor in its launcher), else the file's only
    kernel. None when the cursor is above several kernels (the user chooses) or there is none."""
    if (span := enclosing(spans, line)) is not None:
        return span
    above = [span for span in spans if span.definition.end.line < line]
    if above:
        return above[-1]
    return spans[0] if len({span.name for span in spans}) == 1 else None
