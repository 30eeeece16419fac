"""The knowledge-base view's data (`kernelblaster.knowledgeBase`): the KB as `kernelblaster kb
show --json` has it, and this workspace's part of it: its kernels, the attempts linked to their
sources, and the kept candidates' diffs. Blocking (SQLite, candidate files): call it off the
event loop."""

from __future__ import annotations

import difflib
from pathlib import Path

import msgspec

from kernelblaster.kb.records import Attempt, code_hash
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.view import KBView, kb_view
from kernelblaster.server.editor.documents import path_to_uri
from kernelblaster.server.editor.kernel_locator import locate
from kernelblaster.server.results.cache import KeptCandidate


class KernelLink(msgspec.Struct, kw_only=True):
    """Where a kernel of this workspace is defined, for the view's links back to it."""

    kernel: str
    uri: str
    line: int  # 0-based line of its name in the `__global__` declaration


class CandidateDiff(msgspec.Struct, kw_only=True):
    """The kept best verified rewrite of a kernel, against the source as it is now."""

    kernel: str
    source_uri: str
    candidate_uri: str
    speedup: float | None
    techniques: list[str]
    diff: str  # unified diff, source → candidate; "" once the candidate was applied
    truncated: bool  # the diff was cut at DIFF_LINES lines


class WorkspaceHistory(msgspec.Struct, kw_only=True):
    kernels: list[KernelLink]
    attempts: list[Attempt]  # most recent first
    candidates: list[CandidateDiff]


class KnowledgeBaseAnswer(msgspec.Struct, kw_only=True):
    """`kernelblaster.knowledgeBase`: the data of `kernelblaster kb show --json` and this
    workspace's part of it."""

    kb: KBView
    workspace: WorkspaceHistory


DIFF_LINES = 400
# Attempts looked through for this workspace's: the replay buffer's most recent ones.
SCANNED_ATTEMPTS = 2000
WORKSPACE_ATTEMPTS = 50


def knowledge_base_answer(
    kb: KnowledgeBase,
    documents: dict[Path, str],
    candidates: dict[Path, dict[str, KeptCandidate]],
) -> KnowledgeBaseAnswer:
    """`documents`: the open kernel sources and their text. Blocking (SQLite, candidate files)."""
    kept = [
        (source, candidate, _read(Path(candidate.path)))
        for source, by_kernel in candidates.items()
        for candidate in by_kernel.values()
    ]
    known = {code_hash(text) for text in documents.values()}
    known |= {code_hash(text) for _, _, text in kept if text is not None}
    kernels = [
        KernelLink(kernel=span.name, uri=path_to_uri(path), line=span.name_range.start.line)
        for path, text in documents.items()
        for span in locate(text)
    ]
    return KnowledgeBaseAnswer(
        kb=kb_view(kb),
        workspace=WorkspaceHistory(
            kernels=kernels,
            attempts=linked_attempts(kb.attempts(limit=SCANNED_ATTEMPTS), known)[
                :WORKSPACE_ATTEMPTS
            ],
            candidates=[
                _candidate_diff(source, candidate, text, documents.get(source))
                for source, candidate, text in kept
                if text is not None
            ],
        ),
    )


def linked_attempts(attempts: list[Attempt], known_hashes: set[str]) -> list[Attempt]:
    """The attempts connected to the given sources: one that started from or produced a known
    text makes the other end known too, so a chain of steps (and a source that became one of
    its candidates) is followed to its end. The order of `attempts` is kept."""
    known = set(known_hashes)
    linked: set[str] = set()
    grew = True
    while grew:
        grew = False
        for attempt in attempts:
            ends = {attempt.source_hash, attempt.candidate_hash} - {""}
            if attempt.id not in linked and ends & known:
                linked.add(attempt.id)
                known |= ends
                grew = True
    return [a for a in attempts if a.id in linked]


def _candidate_diff(
    source: Path, candidate: KeptCandidate, candidate_text: str, source_text: str | None
) -> CandidateDiff:
    if source_text is None:
        source_text = _read(source) or ""
    lines = list(
        difflib.unified_diff(
            source_text.splitlines(keepends=True),
            candidate_text.splitlines(keepends=True),
            fromfile=source.name,
            tofile=Path(candidate.path).name,
        )
    )
    return CandidateDiff(
        kernel=candidate.kernel,
        source_uri=path_to_uri(source),
        candidate_uri=path_to_uri(Path(candidate.path)),
        speedup=candidate.speedup,
        techniques=candidate.techniques,
        diff="".join(lines[:DIFF_LINES]),
        truncated=len(lines) > DIFF_LINES,
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # deleted or unreadable since it was found: left out of the view
