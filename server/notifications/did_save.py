"""`textDocument/didSave`: the saved source run (a header: every open source that includes it)."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.documents import is_header
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.pipeline.reruns import includers
from kernelblaster.server.session.language_server import KernelBlasterServer


def did_save(ls: KernelBlasterServer, params: types.DidSaveTextDocumentParams) -> None:
    document, path = ls.kernel_source(params.text_document.uri)
    if document is None:
        return
    for source in includers(ls, path) if is_header(path) else [path]:
        pipeline.schedule(ls, source, debounce=False)
