"""Defensive parsing of an LLM reply into one complete CUDA source file.

An LLM may answer with no code block, with fragments spread over several blocks, with a diff,
with the entry point renamed, or cut off mid-file. Each case raises `ExtractError` whose message
is written *to the LLM*: it says what was wrong and what to send instead, so the lowering agent
can put it straight into its retry prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal, NamedTuple

ExtractErrorKind = Literal["no_code", "ambiguous", "missing_entry", "truncated", "not_cuda"]

# Info strings under which a model may plausibly put a .cu file.
CUDA_LANGUAGES = {"", "cuda", "cu", "cuh", "c++", "cpp", "cxx", "cc", "c", "h", "hpp"}
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`{]*)[^`\n]*$")
# Comments, string and character literals (with escapes), blanked before structural checks so
# that a brace or a name inside them does not count.
_COMMENT_OR_LITERAL = re.compile(
    r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.DOTALL
)


class ExtractError(ValueError):
    def __init__(self, kind: ExtractErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ExtractErrorKind = kind
        self.message = message


class CodeBlock(NamedTuple):
    language: str  # lower-cased info string, "" when none
    text: str
    closed: bool  # False when the reply ended inside the block


def fenced_blocks(reply: str) -> list[CodeBlock]:
    """The fenced code blocks of a Markdown reply (``` or ~~~, CommonMark closing rules)."""
    blocks: list[CodeBlock] = []
    lines = reply.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE_OPEN.match(lines[index])
        index += 1
        if opening is None:
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        while index < len(lines) and not closing.match(lines[index]):
            body.append(lines[index])
            index += 1
        closed = index < len(lines)
        index += 1
        blocks.append(CodeBlock(opening["lang"].lower(), "\n".join(body) + "\n", closed))
    return blocks


def code_skeleton(source: str) -> str:
    """`source` with comments and string/char literals blanked (line structure kept)."""

    def blank(match: re.Match[str]) -> str:
        text = match.group(0)
        if text[0] in "\"'":
            return text[0] * 2
        return "\n" * text.count("\n") or " "

    return _COMMENT_OR_LITERAL.sub(blank, source)


def defines(source_skeleton: str, name: str) -> bool:
    """Whether `name` appears as a function name (followed by an argument list)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", source_skeleton) is not None


def extract_cuda_source(reply: str, *, entry_names: list[str]) -> str:
    """The one complete CUDA file in `reply` that defines every name in `entry_names`."""
    blocks = fenced_blocks(reply)
    if any(not block.closed for block in blocks):
        raise ExtractError(
            "truncated",
            "Your reply was cut off: the last code block is never closed. Send the complete "
            "file again in one ```cuda block, without explanations, so that it fits.",
        )
    code_blocks = [b for b in blocks if b.language in CUDA_LANGUAGES and b.text.strip()]
    if not code_blocks:
        raise _no_code_error(blocks)

    requirement = "defines " + "".join(f"`{n}`, " for n in entry_names) + "a __global__ kernel"
    complete = _unique(
        b.text
        for b in code_blocks
        if _is_complete(skeleton := code_skeleton(b.text), entry_names) and "__global__" in skeleton
    )
    if len(complete) > 1:
        raise ExtractError(
            "ambiguous",
            f"Your reply has {len(complete)} different code blocks that each look like the "
            "complete file, so it is unclear which one to use. Send exactly one ```cuda block "
            "with the final file.",
        )
    if not complete:
        if len(code_blocks) > 1:
            raise ExtractError(
                "ambiguous",
                f"Your reply splits the code over {len(code_blocks)} blocks and none of them is "
                f"the complete file (one that {requirement}). Send the whole file in one "
                "```cuda block.",
            )
        raise _incomplete_error(code_skeleton(code_blocks[0].text), entry_names)

    source = complete[0]
    _check_balanced(code_skeleton(source))
    return source


def _is_complete(skeleton: str, entry_names: list[str]) -> bool:
    return all(defines(skeleton, name) for name in entry_names)


def _unique(texts: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    for text in texts:
        seen.setdefault(text.strip(), text)
    return list(seen.values())


def _no_code_error(blocks: list[CodeBlock]) -> ExtractError:
    languages = sorted({b.language for b in blocks})
    if {"diff", "patch"} & set(languages):
        return ExtractError(
            "not_cuda",
            "Your reply contains a diff. Send the complete new file in one ```cuda block, "
            "not a patch.",
        )
    if languages:
        return ExtractError(
            "not_cuda",
            f"Your code block is marked as {', '.join(languages)}; send the complete CUDA "
            "source file in one ```cuda block.",
        )
    return ExtractError(
        "no_code",
        "Your reply has no code block. Send the complete new .cu file in one ```cuda fenced block.",
    )


def _incomplete_error(skeleton: str, entry_names: list[str]) -> ExtractError:
    missing = [name for name in entry_names if not defines(skeleton, name)]
    if missing:
        names = ", ".join(f"`{n}`" for n in missing)
        return ExtractError(
            "missing_entry",
            f"Your code does not define {names}. The harness calls "
            f"{'it' if len(missing) == 1 else 'them'} by name: keep the original name(s) and "
            "signature(s) exactly, and send the complete file.",
        )
    return ExtractError(
        "missing_entry",
        "Your code has no __global__ kernel. Send the complete file, kernels included.",
    )


def _check_balanced(skeleton: str) -> None:
    for opening, closing in (("{", "}"), ("(", ")")):
        opened, closed = skeleton.count(opening), skeleton.count(closing)
        if opened != closed:
            raise ExtractError(
                "truncated",
                f"Your code is cut off or malformed: it opens {opened} '{opening}' but closes "
                f"{closed} '{closing}'. Send the complete, compilable file in one ```cuda block.",
            )
