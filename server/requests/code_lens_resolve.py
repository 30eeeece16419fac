"""`codeLens/resolve`: a lens's title and command, from the file's cached result."""

from __future__ import annotations

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from kernelblaster.server.editor.documents import text_hash, uri_to_path
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import code_lens


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
        client_commands=frozenset(ls.init_options.client_commands),
    )
    return lens
