"""`kernelblaster.init`, "Write a CUDA kernel for this module": the agents worker has the LLM
write and verify a plain-CUDA kernel for a reference `.py` (as `kernelblaster init` does), and
the server writes `<stem>.cu` beside it atomically and opens it. An existing `.cu` is replaced
only by the separate "Replace" action, once the new kernel is verified and only if the file
still holds what it held when asked; otherwise the kernel is kept under `.kernelblaster/init/`."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from lsprotocol import types

from kernelblaster.atomic_files import save_file, write_atomically
from kernelblaster.folders import BESIDE_FIX, made_folder
from kernelblaster.harness.analysis.reference_source import (
    ReferenceOutline,
    describe_missing,
    outline,
)
from kernelblaster.harness.protocol.init_protocol import (
    InitMessage,
    InitProgress,
    InitRequest,
    InitResult,
)
from kernelblaster.harness.protocol.worker_failures import WorkerFailed
from kernelblaster.harness.target.pairing import kernel_beside
from kernelblaster.server.editor.configuration import llm_missing_message
from kernelblaster.server.editor.documents import STATE_DIR, path_to_uri, text_hash, uri_to_path
from kernelblaster.server.editor.progress import JobReporter
from kernelblaster.server.editor.trust import UNTRUSTED_MESSAGE
from kernelblaster.server.pipeline.agents_worker import run_agents_worker
from kernelblaster.server.views.formatting import timing_line

if TYPE_CHECKING:
    from kernelblaster.server.session.language_server import KernelBlasterServer

_decoder = msgspec.json.Decoder(InitMessage)
NEEDS_LLM = "Writing a kernel"


class InitArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str  # the reference .py
    replace: bool = False  # replace an existing <stem>.cu (once the new kernel is verified)


class InitReply(msgspec.Struct, kw_only=True):
    """The `kernelblaster.init` command's answer to the editor."""

    written: bool  # <stem>.cu now holds a verified kernel
    message: str
    path: str | None = None  # the file with the verified kernel: the .cu, or the kept copy


def kept_kernel_beside(reference: Path) -> Path:
    """Where a verified kernel goes when its `.cu` may not be written (it appeared or changed
    while the kernel was being written)."""
    return reference.parent / STATE_DIR / "init" / kernel_beside(reference).name


def not_offerable(ls: KernelBlasterServer, name: str, found: ReferenceOutline) -> str | None:
    """Why "Write a CUDA kernel" can't run on the reference `name` right now, or None."""
    return _unable(ls) or _not_a_problem(name, found)


def _unable(ls: KernelBlasterServer) -> str | None:
    """What keeps the server from running LLM-written code at all."""
    if not ls.trust.trusted:
        return UNTRUSTED_MESSAGE
    return llm_missing_message(ls.settings, NEEDS_LLM)


def _not_a_problem(name: str, found: ReferenceOutline) -> str | None:
    if found.solution:
        return (
            f"{name} is a KernelBench solution (class ModelNew), not a problem: write the kernel "
            "for its problem file."
        )
    if found.missing:
        return describe_missing(name, found.missing)
    return None


async def write_kernel(ls: KernelBlasterServer, args: InitArgs) -> InitReply:
    await ls.ready.wait()
    reference = uri_to_path(args.uri)
    if reference is None or reference.suffix != ".py":
        name = reference.name if reference else args.uri
        return _tell(ls, f"{name} is not a Python file on disk.", written=False)
    try:
        text = await asyncio.to_thread(reference.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return _tell(ls, f"Cannot read {reference.name}: {exc}", written=False)
    try:
        found_hash = await asyncio.to_thread(_hash_of, kernel_beside(reference))
    except OSError as exc:
        return _tell(ls, f"Cannot read {kernel_beside(reference).name}: {exc}", written=False)
    refusal = _refusal(ls, args, reference, text, found_hash)
    if refusal is not None:
        return _tell(ls, refusal, written=False, kind=types.MessageType.Warning)
    ls.writing_kernels.add(reference)
    try:
        return await _run(ls, args, reference, found_hash)
    finally:
        ls.writing_kernels.discard(reference)


def _refusal(
    ls: KernelBlasterServer, args: InitArgs, reference: Path, text: str, found_hash: str | None
) -> str | None:
    if (reason := _unable(ls)) is not None:
        return reason
    document = ls.workspace.text_documents.get(args.uri)
    if document is not None and document.source != text:
        return (
            f"{reference.name} has unsaved changes: save it first (the kernel is written for "
            "the file on disk)."
        )
    found = outline(text) or ReferenceOutline([], solution=False)
    if (reason := _not_a_problem(reference.name, found)) is not None:
        return reason
    target = kernel_beside(reference)
    if found_hash is not None and not args.replace:
        return (
            f"{target.name} exists and is never replaced without asking: use "
            f'"Replace {target.name} with a new CUDA kernel for this module" (it is replaced '
            "only once a new kernel is verified), or move it away."
        )
    target_uri = ls.documents.uri_of(target)
    open_target = ls.workspace.text_documents.get(target_uri) if target_uri else None
    if open_target is not None and found_hash != text_hash(open_target.source):
        return f"{target.name} has unsaved changes in the editor: save or close it first."
    if reference in ls.writing_kernels:
        return f"A kernel for {reference.name} is already being written."
    return None


async def _run(
    ls: KernelBlasterServer, args: InitArgs, reference: Path, found_hash: str | None
) -> InitReply:
    target = kernel_beside(reference)
    reporter = JobReporter(
        ls, ls.cancels, args.uri, f"KernelBlaster: writing a CUDA kernel for {reference.name}"
    )

    def on_progress(message: InitProgress) -> None:
        reporter.report("init", f"{reference.name}: {message.message}")

    try:
        result = await run_agents_worker(
            ls,
            reporter,
            InitRequest(reference=str(reference), settings=ls.settings),
            _decoder,
            InitResult,
            on_progress,
            phase="init",
            label=reference.name,
            cwd=reference.parent,
        )
    except WorkerFailed as failure:
        return _tell(ls, f"Writing {target.name} failed: {failure.message}", written=False)
    if result is None:
        return InitReply(written=False, message=f"Writing {target.name} was cancelled.")
    for line in result.failures:
        ls.window_log_message(
            types.LogMessageParams(type=types.MessageType.Log, message=f"{target.name}: {line}")
        )
    if result.source is None:
        reporter.end("failed", f"{reference.name}: no verified kernel")
        return _tell(
            ls, f"No {target.name} written: {result.error} ({result.usage})", written=False
        )
    try:
        disturbed = await asyncio.to_thread(_write, reference, result.source, found_hash)
    except OSError as exc:  # a read-only folder, a full disk: nothing was half-written
        reporter.end("failed", f"{reference.name}: {exc}")
        return _tell(ls, f"The verified kernel could not be written: {exc}", written=False)
    written = disturbed is None
    path = target if written else kept_kernel_beside(reference)
    verified = timing_line(result.check) if result.check and result.check.timing else "verified"
    if written:
        message = f"Wrote {target.name}: {verified} ({result.usage})."
        await _open(ls, target)
    else:
        message = (
            f"{target.name} {disturbed} while the kernel was being written, so it was not "
            f"replaced; the verified kernel is in {path}."
        )
    reporter.end("done", f"{reference.name}: {message}")
    return _tell(
        ls,
        message,
        written=written,
        path=path,
        kind=types.MessageType.Info if written else types.MessageType.Warning,
    )


def _hash_of(path: Path) -> str | None:
    """The hash of `path`'s bytes (text_hash of its text when it is UTF-8); None when absent."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _write(reference: Path, text: str, found_hash: str | None) -> str | None:
    """Write the verified kernel to `<stem>.cu` if that is still as the user left it (absent, or
    holding the text of `found_hash`); otherwise keep it under .kernelblaster/init/ and say what
    happened to the .cu ("appeared", "changed"). Blocking: call off the event loop."""
    target = kernel_beside(reference)
    try:
        if found_hash is None:
            save_file(target, text, force=False)  # linked into place: never over a newcomer
            return None
        if _hash_of(target) == found_hash:
            write_atomically(target, text)
            return None
    except FileExistsError:
        pass
    kept = kept_kernel_beside(reference)
    made_folder(kept.parent, fix=BESIDE_FIX)
    write_atomically(kept, text)
    return "appeared" if found_hash is None else "changed"


async def _open(ls: KernelBlasterServer, path: Path) -> None:
    """Show the kernel in the editor: opening it runs the save pipeline on it."""
    window = ls.client_capabilities.window
    if window is None or window.show_document is None or not window.show_document.support:
        return
    await ls.window_show_document_async(
        types.ShowDocumentParams(uri=path_to_uri(path), take_focus=True)
    )


def _tell(
    ls: KernelBlasterServer,
    message: str,
    *,
    written: bool,
    path: Path | None = None,
    kind: types.MessageType = types.MessageType.Error,
) -> InitReply:
    ls.window_show_message(types.ShowMessageParams(type=kind, message=message))
    return InitReply(written=written, message=message, path=str(path) if path else None)
