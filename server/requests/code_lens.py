"""`textDocument/codeLens`: a lens above each kernel, placed from the text; titled on resolve."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.documents import is_header, to_client_range
from kernelblaster.server.editor.kernel_locator import locate
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import code_lens


async def code_lens_request(
    ls: KernelBlasterServer, params: types.CodeLensParams
) -> list[types.CodeLens]:
    # Answered at once, from the initialization options' settings: a request held until the
    # server is ready makes VS Code space out its next lens requests as long (its debounce
    # follows a provider's average time), so lenses refreshed later took that long to show.
    document, path = ls.kernel_source(params.text_document.uri)
    if document is None or not ls.settings.code_lens or is_header(path):
        return []
    lenses = code_lens.kernel_lenses(document.uri, document.version or 0, locate(document.source))
    codec = ls.workspace.position_codec
    lines = document.lines  # pygls splits the whole text on every read of `lines`
    for lens in lenses:
        lens.range = to_client_range(codec, lines, lens.range)
    return lenses
