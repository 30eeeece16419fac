"""`textDocument/didOpen`: the file's cached result and kept candidates shown, and a run started
when the cache does not hold this text's."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from kernelblaster.server.editor.documents import is_header
from kernelblaster.server.pipeline import optimize
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.session.language_server import KernelBlasterServer


async def did_open(ls: KernelBlasterServer, params: types.DidOpenTextDocumentParams) -> None:
    document, path = ls.kernel_source(params.text_document.uri)
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
    await pipeline.show_cached(ls, path)
    # Closed while this open was under way (its close cancelled no job yet): nothing to run.
    if ls.workspace.text_documents.get(document.uri) is not document:
        return
    pipeline.run_if_stale(ls, path, document.source)
