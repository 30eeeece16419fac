"""`textDocument/didClose`: the file's job and build ahead cancelled, what was kept dropped."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.documents import uri_to_path
from kernelblaster.server.session.language_server import KernelBlasterServer


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
