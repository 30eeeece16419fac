"""`textDocument/didChange`: the unsaved text built ahead of its save (session/build_ahead.py);
pygls has already applied the change to the document."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.documents import is_header
from kernelblaster.server.session.language_server import KernelBlasterServer


def did_change(ls: KernelBlasterServer, params: types.DidChangeTextDocumentParams) -> None:
    document, path = ls.kernel_source(params.text_document.uri)
    if document is None or is_header(path) or not ls.documents.is_open(path):
        return
    if not (ls.trust.trusted and ls.ready.is_set() and ls.settings.build_on_change):
        return
    if ls.documents.changed_since_read(path, document.source):
        ls.ahead.start(path, document.source, ls.settings)
    else:  # back to the text the last run built (an undo)
        ls.ahead.cancel(path)
