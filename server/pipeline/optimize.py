"""`kernelblaster.optimize` and `kernelblaster.showDiff`: run the optimize worker on one kernel
with progress and cancellation, keep its best verified candidate beside the source, and apply it
with `workspace/applyEdit` against the document version the optimization started from."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from lsprotocol import types

from kernelblaster.folders import BESIDE_FIX, made_folder
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeMessage,
    OptimizeProgress,
    OptimizeRequest,
    OptimizeResult,
)
from kernelblaster.harness.protocol.worker_failures import WorkerFailed
from kernelblaster.server.editor.configuration import llm_missing_message
from kernelblaster.server.editor.documents import STATE_DIR, path_to_uri, text_hash, uri_to_path
from kernelblaster.server.editor.kernel_locator import by_name, locate
from kernelblaster.server.editor.progress import JobReporter
from kernelblaster.server.editor.trust import UNTRUSTED_MESSAGE
from kernelblaster.server.pipeline.agents_worker import run_agents_worker
from kernelblaster.server.pipeline.save import refresh_ranking
from kernelblaster.server.results.cache import KeptCandidate
from kernelblaster.server.views import formatting

if TYPE_CHECKING:
    from kernelblaster.server.session.language_server import KernelBlasterServer

_decoder = msgspec.json.Decoder(OptimizeMessage)


class OptimizeArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str
    kernel: str
    technique: str | None = None
    version: int


class ShowDiffArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str
    kernel: str


class OptimizeReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The `kernelblaster.optimize` command's answer to the editor."""

    applied: bool
    message: str
    # What the user must know before keeping the result (OptimizeResult.warning): the candidate
    # was not checked for memory errors, or faster ones were passed over. The server has shown
    # it already (window/showMessage, a warning), whichever way the command was run.
    warning: str = ""


def kept_candidate_path(source: Path, kernel: str) -> Path:
    """Where the best verified candidate of `kernel` is kept for "Show diff", in the state dir."""
    return source.parent / STATE_DIR / "candidates" / f"{source.stem}.{kernel}.best{source.suffix}"


def find_candidates(source: Path) -> dict[str, KeptCandidate]:
    """Candidates kept from earlier sessions (blocking: call off the event loop)."""
    directory = source.parent / STATE_DIR / "candidates"
    prefix, suffix = f"{source.stem}.", f".best{source.suffix}"
    found = {}
    for path in directory.glob(f"{prefix}*{suffix}") if directory.is_dir() else []:
        kernel = path.name[len(prefix) : -len(suffix)]
        found[kernel] = KeptCandidate(kernel=kernel, path=str(path), base_hash="")
    return found


async def optimize_kernel(ls: KernelBlasterServer, args: OptimizeArgs) -> OptimizeReply:
    path = uri_to_path(args.uri)
    document = ls.workspace.text_documents.get(args.uri)
    refusal = _refusal(ls, args, path, document)
    if refusal is not None:
        return _tell(ls, refusal, applied=False, kind=types.MessageType.Warning)
    assert path is not None and document is not None
    settings = ls.settings
    base_text = document.source
    reporter = JobReporter(ls, ls.cancels, args.uri, f"KernelBlaster: optimizing {args.kernel}")
    request = OptimizeRequest(
        source=str(path),
        source_text=base_text,
        kernel=args.kernel,
        technique=args.technique,
        rollouts=settings.rollouts,
        depth=settings.depth,
        top_k=settings.top_k,
        settings=settings,
    )

    def on_progress(message: OptimizeProgress) -> None:
        best = (
            f" (best so far {formatting.factor(message.best_speedup)})"
            if message.best_speedup
            else ""
        )
        percent = round(100 * message.step / message.total) if message.total else None
        reporter.report("optimize", f"{args.kernel}: {message.message}{best}", percent)

    try:
        result = await run_agents_worker(
            ls,
            reporter,
            request,
            _decoder,
            OptimizeResult,
            on_progress,
            phase="optimize",
            label=args.kernel,
            cwd=path.parent,
        )
    except WorkerFailed as failure:
        return _tell(ls, f"Optimizing {args.kernel} failed: {failure.message}", applied=False)
    if result is None:
        return OptimizeReply(applied=False, message=f"Optimizing {args.kernel} was cancelled.")
    await refresh_ranking(ls, path)  # the worker recorded its attempts in the KB
    # An error after an improvement only says the policy update was skipped: the candidate stands.
    if not result.improved or not result.best_source:
        reporter.end("done", f"{args.kernel}: {result.message}")
        kind = types.MessageType.Warning if result.passed_over else types.MessageType.Info
        return _tell(ls, f"{args.kernel}: {result.message}", applied=False, kind=kind)
    candidate = await _keep_candidate(ls, path, result, text_hash(base_text))
    reporter.end("done", f"{args.kernel}: {result.message}")
    return await _apply(ls, args, path, result, result.best_source, candidate)


def _refusal(
    ls: KernelBlasterServer, args: OptimizeArgs, path: Path | None, document
) -> str | None:
    if path is None or document is None:
        return f"Open {args.uri} in the editor to optimize its kernels."
    if not ls.trust.trusted:
        return UNTRUSTED_MESSAGE
    if (missing := llm_missing_message(ls.settings)) is not None:
        return missing
    if document.version != args.version:
        return (
            f"{path.name} changed since this action was offered (version {args.version}, now "
            f"{document.version}); run it again."
        )
    if by_name(locate(document.source), args.kernel) is None:
        return f"{path.name} has no __global__ kernel named {args.kernel}."
    return None


async def _keep_candidate(
    ls: KernelBlasterServer, source: Path, result: OptimizeResult, base_hash: str
) -> KeptCandidate:
    target = kept_candidate_path(source, result.kernel)

    def write() -> None:
        made_folder(target.parent, fix=BESIDE_FIX)
        target.write_text(result.best_source or "", encoding="utf-8")

    await asyncio.to_thread(write)
    candidate = KeptCandidate(
        kernel=result.kernel,
        path=str(target),
        speedup=result.speedup,
        techniques=result.techniques,
        base_hash=base_hash,
    )
    ls.candidates.keep(source, candidate)
    return candidate


async def _apply(
    ls: KernelBlasterServer,
    args: OptimizeArgs,
    path: Path,
    result: OptimizeResult,
    best_source: str,
    candidate: KeptCandidate,
) -> OptimizeReply:
    """Replace the text of `path` (open as `args.uri`) with `best_source`, `result`'s."""
    speedup = f" {formatting.factor(result.speedup)} faster" if result.speedup else ""
    if result.warning:  # said before the edit, whichever way it goes
        _tell(ls, f"{args.kernel}: {result.warning}", applied=False, kind=types.MessageType.Warning)
    document = ls.workspace.text_documents.get(args.uri)
    if document is None or document.version != args.version:
        now = "closed" if document is None else f"now version {document.version}"
        return _tell(
            ls,
            f"Not applied: {path.name} changed while optimizing "
            f"{args.kernel} (started from version {args.version}, {now}). The verified "
            f'candidate{speedup} is in {candidate.path}: use "Show diff".',
            applied=False,
            kind=types.MessageType.Warning,
        )
    edit = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(
            uri=args.uri, version=args.version
        ),
        edits=[types.TextEdit(range=whole_document(ls, document.source), new_text=best_source)],
    )
    label = f"KernelBlaster: {args.kernel}{speedup}"
    applied = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(
            edit=types.WorkspaceEdit(document_changes=[edit]), label=label
        )
    )
    if not applied.applied:
        reason = applied.failure_reason or "the editor refused the edit"
        return _tell(
            ls, f"Not applied: {reason}. The candidate is in {candidate.path}.", applied=False
        )
    techniques = ", ".join(result.techniques)
    memory = result.sanitizer.summary if result.sanitizer else "not checked for memory errors"
    return OptimizeReply(
        applied=True,
        message=f"{args.kernel}{speedup}"
        + (f" ({techniques})" if techniques else "")
        + f"; {memory}.",
        warning=result.warning,
    )


async def show_diff(ls: KernelBlasterServer, args: ShowDiffArgs) -> None:
    path = uri_to_path(args.uri)
    candidate = ls.candidates.get(path, args.kernel) if path else None
    if candidate is None:
        _tell(
            ls,
            f'No verified candidate for {args.kernel} yet: run "Optimize kernel".',
            applied=False,
        )
        return
    await ls.window_show_document_async(
        types.ShowDocumentParams(uri=path_to_uri(Path(candidate.path)), take_focus=True)
    )


def _tell(
    ls: KernelBlasterServer,
    message: str,
    *,
    applied: bool,
    kind: types.MessageType = types.MessageType.Error,
) -> OptimizeReply:
    ls.window_show_message(types.ShowMessageParams(type=kind, message=message))
    return OptimizeReply(applied=applied, message=message)


def whole_document(ls: KernelBlasterServer, text: str) -> types.Range:
    """From the start to the end of `text`, in the client's position encoding."""
    lines = text.split("\n")
    last = lines[-1]
    end = types.Position(len(lines) - 1, ls.workspace.position_codec.client_num_units(last))
    return types.Range(types.Position(0, 0), end)
