"""`textDocument/hover` on a kernel's declaration, answered from the cache."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.documents import from_client_position, text_hash, to_client_range
from kernelblaster.server.editor.kernel_locator import enclosing, locate
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.hover import kernel_hover

HOVER_TECHNIQUES = 5


def hover(ls: KernelBlasterServer, params: types.HoverParams) -> types.Hover | None:
    document, path = ls.kernel_source(params.text_document.uri)
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
