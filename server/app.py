"""The one place where LSP messages are wired to the server's features (documents, the save
pipeline, ranking, hover, code actions, optimize, the knowledge-base view, settings, the
watcher); the state they share lives on `KernelBlasterServer` (language_server.py). Handlers stay
thin over pure functions; anything that could block runs in a worker process or a thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams

from kernelblaster.harness.analysis.reference_source import outline
from kernelblaster.harness.protocol.records import ProfileDepth
from kernelblaster.harness.protocol.worker_client import harness_command
from kernelblaster.harness.target.pairing import REFERENCE_SUFFIX, kernel_beside
from kernelblaster.server.editor.configuration import (
    apply_client_settings,
    llm_missing_message,
    parse_init_options,
    results_change,
)
from kernelblaster.server.editor.documents import (
    BINDINGS_SUFFIX,
    from_client_position,
    is_header,
    is_kernel_source,
    is_reference,
    text_hash,
    to_client_range,
    uri_to_path,
)
from kernelblaster.server.editor.kernel_locator import enclosing, kernel_meant, locate
from kernelblaster.server.editor.trust import workspace_trust
from kernelblaster.server.editor.watcher import CONFIG_NAMES, SourceWatcher
from kernelblaster.server.pipeline import optimize, write_kernel
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.session import settings_sync
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import code_actions, code_lens, profile_view
from kernelblaster.server.views.hover import kernel_hover

HOVER_TECHNIQUES = 5


server = KernelBlasterServer()


def _document(ls: KernelBlasterServer, uri: str):
    """The open kernel source at `uri` and its path, or (None, None)."""
    document = ls.workspace.text_documents.get(uri)
    path = uri_to_path(uri)
    if document is None or not is_kernel_source(path, document.language_id):
        return None, None
    return document, path


# --- lifecycle ----------------------------------------------------------------------------


@server.feature(types.INITIALIZE)
def initialize(ls: KernelBlasterServer, params: types.InitializeParams) -> None:
    options, problem = parse_init_options(params.initialization_options)
    ls.init_options = options
    ls.trust, trust_problem = workspace_trust(options.trusted, ls.workspace_root())
    # Usable at once (e.g. the worker command), before the full refresh in `initialized`.
    ls.settings, _ = apply_client_settings(ls.settings, options.settings)
    for said in (problem, trust_problem):
        if said:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=said)
            )


@server.feature(types.INITIALIZED)
async def initialized(ls: KernelBlasterServer, params: types.InitializedParams) -> None:
    ls.watcher = SourceWatcher(asyncio.get_running_loop(), lambda path: _external_change(ls, path))
    if (root := ls.workspace_root()) is not None:
        ls.watcher.watch(root)
    try:
        await settings_sync.refresh(ls)
    finally:
        ls.ready.set()
    if ls.trust.trusted:  # workers run only here: their zygote imports torch meanwhile
        ls.spare_workers.begin_zygote(harness_command(ls.settings))


@server.feature(types.SHUTDOWN)
async def shutdown(ls: KernelBlasterServer, params: None) -> None:
    await ls.ahead.close()
    await ls.jobs.close()
    await ls.spare_workers.close()
    if ls.watcher is not None:
        ls.watcher.stop()
    ls.knowledge.close()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(
    ls: KernelBlasterServer, params: types.DidChangeConfigurationParams
) -> None:
    pushed = params.settings.get("kernelblaster") if isinstance(params.settings, dict) else None
    before = ls.settings
    await settings_sync.refresh(ls, pushed)
    for path in ls.documents.paths():
        await pipeline.refresh_ranking(ls, path)
        pipeline.publish(ls, path)
    if results_change(before, ls.settings):  # e.g. nvcc's path fixed: no stale "not found"
        _rerun_open_sources(ls)


@server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
def cancel_progress(ls: KernelBlasterServer, params: types.WorkDoneProgressCancelParams) -> None:
    ls.cancels.cancel(params.token)


# --- documents ----------------------------------------------------------------------------


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
async def did_open(ls: KernelBlasterServer, params: types.DidOpenTextDocumentParams) -> None:
    document, path = _document(ls, params.text_document.uri)
    if document is None:
        return
    ls.documents.open(path, document.uri)
    if ls.watcher is not None:
        ls.watcher.watch(path.parent)
    await ls.ready.wait()
    await asyncio.to_thread(ls.history.open, path, ls.settings)
    if not is_header(path) and ls.trust.trusted and ls.settings.build_on_change:
        ls.ahead.expect_edits(ls.settings)
    ls.candidates.replace(path, await asyncio.to_thread(optimize.find_candidates, path))
    result = await pipeline.show_cached(ls, path)
    # Closed while this open was under way (its close cancelled no job yet): nothing to run.
    if ls.workspace.text_documents.get(document.uri) is not document:
        return
    if not is_header(path) and (result is None or result.text_hash != text_hash(document.source)):
        pipeline.schedule(ls, path, debounce=False)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: KernelBlasterServer, params: types.DidChangeTextDocumentParams) -> None:
    """Build the unsaved text ahead of its save (build_ahead.py); pygls has already applied
    the change to the document."""
    document, path = _document(ls, params.text_document.uri)
    if document is None or is_header(path) or not ls.documents.is_open(path):
        return
    if not (ls.trust.trusted and ls.ready.is_set() and ls.settings.build_on_change):
        return
    if ls.documents.changed_since_read(path, document.source):
        ls.ahead.start(path, document.source, ls.settings)
    else:  # back to the text the last run built (an undo)
        ls.ahead.cancel(path)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: KernelBlasterServer, params: types.DidSaveTextDocumentParams) -> None:
    document, path = _document(ls, params.text_document.uri)
    if document is None:
        return
    for source in _includers(ls, path) if is_header(path) else [path]:
        pipeline.schedule(ls, source, debounce=False)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: KernelBlasterServer, params: types.DidCloseTextDocumentParams) -> None:
    path = uri_to_path(params.text_document.uri)
    if path is None or not ls.documents.close(path):
        return
    ls.jobs.cancel(str(path))
    ls.ahead.cancel(path)
    ls.knowledge.forget(path)
    ls.history.close(path)
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
    )


def _includers(ls: KernelBlasterServer, header: Path) -> list[Path]:
    """Open sources (not headers) that include `header` by name."""
    found = []
    for path in ls.documents.paths():
        document = ls.workspace.text_documents.get(ls.documents.uri_for(path))
        if not is_header(path) and document is not None and header.name in document.source:
            found.append(path)
    return found


def _external_change(ls: KernelBlasterServer, path: Path) -> None:
    """A file changed outside the editor (runs on the event loop, from the watcher)."""
    if path.name in CONFIG_NAMES:
        ls.background(_reconfigure(ls))
    elif path.suffix in (REFERENCE_SUFFIX, BINDINGS_SUFFIX):  # foo.cu's foo.py or foo.cpp
        for source in ls.documents.paths():
            if source.parent == path.parent and source.stem == path.stem:
                pipeline.schedule(ls, source)
    elif is_header(path):
        for source in _includers(ls, path):
            pipeline.schedule(ls, source)
    elif ls.documents.is_open(path):
        ls.background(_rerun_if_changed(ls, path))


async def _rerun_if_changed(ls: KernelBlasterServer, path: Path) -> None:
    # Writers truncate, then write: read once the file has settled, not at the first event.
    await asyncio.sleep(ls.jobs.debounce_s)
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # deleted or being rewritten; the next event or save brings it back
    if ls.documents.changed_since_read(path, text):
        pipeline.schedule(ls, path)


async def _reconfigure(ls: KernelBlasterServer) -> None:
    await settings_sync.refresh(ls)
    _rerun_open_sources(ls)


def _rerun_open_sources(ls: KernelBlasterServer) -> None:
    """Run every open source again (not the headers: their includers are sources)."""
    for path in ls.documents.paths():
        if not is_header(path):
            pipeline.schedule(ls, path)


# --- hover and code actions (answered from the cache) -------------------------------------


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: KernelBlasterServer, params: types.HoverParams) -> types.Hover | None:
    document, path = _document(ls, params.text_document.uri)
    if document is None:
        return None
    lines = document.lines
    position = from_client_position(ls.workspace.position_codec, lines, params.position)
    span = enclosing(locate(document.source), position.line)
    # Only on the declaration (up to the name), not anywhere in the body.
    if span is None or position.line > span.name_range.end.line:
        return None
    result = ls.cache.get(path)
    history = ls.history.history(path)
    markdown = kernel_hover(
        span.name,
        result,
        ls.knowledge.for_kernel(path, span.name)[: max(HOVER_TECHNIQUES, ls.settings.top_k)],
        current=result is not None and result.profiled_text_hash == text_hash(document.source),
        note=None if ls.trust.trusted else "Workspace not trusted: nothing is built or run.",
        delta=ls.history.delta(path, result.response.check, result.text_hash) if result else None,
        history=history.points if history else None,
    )
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown),
        range=to_client_range(ls.workspace.position_codec, lines, span.name_range),
    )


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[code_actions.KIND]),
)
async def code_action(
    ls: KernelBlasterServer, params: types.CodeActionParams
) -> list[types.CodeAction]:
    await ls.ready.wait()  # the actions' disabled reasons follow the settings
    if is_reference(uri_to_path(params.text_document.uri)):
        return _reference_actions(ls, params)
    document, path = _document(ls, params.text_document.uri)
    if document is None:
        return []
    position = from_client_position(ls.workspace.position_codec, document.lines, params.range.start)
    span = enclosing(locate(document.source), position.line)
    if span is None:
        return []
    return code_actions.kernel_actions(
        document.uri,
        span.name,
        document.version or 0,
        ls.knowledge.for_kernel(path, span.name),
        top_k=ls.settings.top_k,
        candidate=ls.candidates.get(path, span.name),
        disabled_reason=llm_missing_message(ls.settings) if _shows_disabled(ls) else None,
    )


def _reference_actions(
    ls: KernelBlasterServer, params: types.CodeActionParams
) -> list[types.CodeAction]:
    """ "Write a CUDA kernel for this module" on the definitions of a KernelBench-style
    reference (class Model, get_inputs, get_init_inputs); nothing on any other Python file."""
    document = ls.workspace.text_documents.get(params.text_document.uri)
    found = outline(document.source) if document is not None else None
    if document is None or found is None or found.solution:
        return []
    position = from_client_position(ls.workspace.position_codec, document.lines, params.range.start)
    if found.at(position.line) is None:
        return []
    reference = uri_to_path(document.uri)
    assert reference is not None
    target = kernel_beside(reference)
    return code_actions.init_actions(
        document.uri,
        target.name,
        target_exists=target.exists(),
        disabled_reason=(
            write_kernel.not_offerable(ls, reference.name, found) if _shows_disabled(ls) else None
        ),
    )


def _shows_disabled(ls: KernelBlasterServer) -> bool:
    text_document = ls.client_capabilities.text_document
    code_action_caps = text_document.code_action if text_document else None
    return bool(code_action_caps and code_action_caps.disabled_support)


# --- code lenses (places from the text, titles from the cache) -----------------------------


@server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=True))
async def code_lens_request(
    ls: KernelBlasterServer, params: types.CodeLensParams
) -> list[types.CodeLens]:
    await ls.ready.wait()  # the setting decides
    document, path = _document(ls, params.text_document.uri)
    if document is None or not ls.settings.code_lens or is_header(path):
        return []
    lenses = code_lens.kernel_lenses(document.uri, document.version or 0, locate(document.source))
    codec = ls.workspace.position_codec
    lines = document.lines  # pygls splits the whole text on every read of `lines`
    for lens in lenses:
        lens.range = to_client_range(codec, lines, lens.range)
    return lenses


@server.feature(types.CODE_LENS_RESOLVE)
def code_lens_resolve(ls: KernelBlasterServer, lens: types.CodeLens) -> types.CodeLens:
    data = code_lens.parse(lens.data)
    if data is None:
        raise JsonRpcInvalidParams(f"codeLens/resolve: not a KernelBlaster lens: {lens.data!r}")
    path = uri_to_path(data.uri)
    document = ls.workspace.text_documents.get(data.uri)
    result = ls.cache.get(path) if path is not None else None
    lens.command = code_lens.resolve(
        data,
        result,
        current=document is not None
        and result is not None
        and result.profiled_text_hash == text_hash(document.source),
        has_report=path is not None and ls.history.latest_report(path) is not None,
        client_commands=frozenset(ls.init_options.client_commands),
    )
    return lens


# --- commands -----------------------------------------------------------------------------


def _argument(args: tuple[Any, ...], kind: type[msgspec.Struct], command: str) -> Any:
    if len(args) != 1:
        raise JsonRpcInvalidParams(f"{command} takes one argument object, got {len(args)}")
    try:
        return msgspec.convert(args[0], kind)
    except msgspec.ValidationError as exc:
        raise JsonRpcInvalidParams(f"{command}: {exc}") from exc


class ProfileArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str
    depth: str | None = None


class KernelAtArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str
    position: types.Position  # in the client's position encoding


class KernelAt(msgspec.Struct, kw_only=True):
    """`kernelblaster.kernelAt`'s answer: the kernel a command at the position is about (see
    `kernel_meant`) and the range of its name, or null with every kernel of the document for
    the user to choose from (none: the document has no `__global__` kernel)."""

    kernel: str | None
    range: types.Range | None
    kernels: list[str]


@server.command(code_actions.KERNEL_AT)
def kernel_at_command(ls: KernelBlasterServer, *args: Any) -> dict:
    request = _argument(args, KernelAtArgs, code_actions.KERNEL_AT)
    document = ls.workspace.text_documents.get(request.uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{code_actions.KERNEL_AT}: {request.uri} is not open")
    spans = locate(document.source)
    # Only the line matters, and lines are the same in every position encoding.
    span = kernel_meant(spans, request.position.line)
    codec = ls.workspace.position_codec
    return msgspec.to_builtins(
        KernelAt(
            kernel=span.name if span else None,
            range=to_client_range(codec, document.lines, span.name_range) if span else None,
            kernels=list(dict.fromkeys(span.name for span in spans)),
        )
    )


@server.command(code_actions.OPTIMIZE)
async def optimize_command(ls: KernelBlasterServer, *args: Any) -> dict:
    outcome = await optimize.optimize_kernel(
        ls, _argument(args, optimize.OptimizeArgs, code_actions.OPTIMIZE)
    )
    return msgspec.to_builtins(outcome)


@server.command(code_actions.INIT)
async def init_command(ls: KernelBlasterServer, *args: Any) -> dict:
    reply = await write_kernel.write_kernel(
        ls, _argument(args, write_kernel.InitArgs, code_actions.INIT)
    )
    return msgspec.to_builtins(reply)


@server.command(code_actions.SHOW_DIFF)
async def show_diff_command(ls: KernelBlasterServer, *args: Any) -> None:
    await optimize.show_diff(ls, _argument(args, optimize.ShowDiffArgs, code_actions.SHOW_DIFF))


@server.command(code_actions.PROFILE)
def profile_command(ls: KernelBlasterServer, *args: Any) -> None:
    request = _argument(args, ProfileArgs, code_actions.PROFILE)
    path = uri_to_path(request.uri)
    if request.depth not in (None, "quick", "full"):
        raise JsonRpcInvalidParams(f"{code_actions.PROFILE}: depth must be 'quick' or 'full'")
    # checked just above (ProfileArgs keeps a str, so that a wrong depth gets that message)
    depth = cast("ProfileDepth | None", request.depth)
    if path is None or not is_kernel_source(path) or not path.is_file():
        raise JsonRpcInvalidParams(f"{code_actions.PROFILE}: {request.uri} is not a .cu file")
    pipeline.schedule(ls, path, depth, debounce=False)


@server.command(code_actions.KNOWLEDGE_BASE)
async def knowledge_base_command(ls: KernelBlasterServer, *args: Any) -> dict:
    await ls.ready.wait()
    documents = {
        path: document.source
        for uri, document in ls.workspace.text_documents.items()
        if (path := uri_to_path(uri)) is not None and is_kernel_source(path)
    }
    answer = await ls.knowledge.answer(documents, ls.candidates.by_source())
    if answer is None:
        raise JsonRpcInternalError(
            "The knowledge base could not be opened: see kernelblaster.kbPath."
        )
    return msgspec.to_builtins(answer)


@server.command(code_lens.KERNEL_PROFILE)
def kernel_profile_command(ls: KernelBlasterServer, *args: Any) -> dict:
    request = _argument(args, profile_view.ProfileArgs, code_lens.KERNEL_PROFILE)
    document, path = _document(ls, request.uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{code_lens.KERNEL_PROFILE}: {request.uri} is not an open .cu")
    kernel = request.kernel
    if kernel is None:
        spans = locate(document.source)
        if not spans:
            raise JsonRpcInvalidParams(f"{code_lens.KERNEL_PROFILE}: {path.name} has no kernel")
        kernel = spans[0].name
    result = ls.cache.get(path)
    history = ls.history.history(path)
    view = profile_view.kernel_profile(
        document.uri,
        kernel,
        result,
        lines=document.lines,
        text_hash=text_hash(document.source),
        delta=ls.history.delta(path, result.response.check, result.text_hash) if result else None,
        history=history.points if history else [],
        report=ls.history.latest_report(path),
    )
    if request.show:
        ls.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Info, message=profile_view.profile_text(view)
            )
        )
    return msgspec.to_builtins(view)


@server.command(code_lens.NCU_REPORT)
def ncu_report_command(ls: KernelBlasterServer, *args: Any) -> dict:
    request = _argument(args, profile_view.ProfileArgs, code_lens.NCU_REPORT)
    path = uri_to_path(request.uri)
    if not is_kernel_source(path):
        raise JsonRpcInvalidParams(f"{code_lens.NCU_REPORT}: {request.uri} is not a .cu file")
    assert path is not None
    answer = profile_view.ncu_report(ls.history.latest_report(path), path)
    if request.show:
        ls.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Info, message=answer.message)
        )
    return msgspec.to_builtins(answer)
