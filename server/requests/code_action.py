"""`textDocument/codeAction`: "Optimize kernel" and one action per ranked technique on a
kernel; "Write a CUDA kernel for this module" on a KernelBench-style reference."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.harness.analysis.reference_source import outline
from kernelblaster.harness.target.pairing import kernel_beside
from kernelblaster.server.editor.configuration import llm_missing_message
from kernelblaster.server.editor.documents import from_client_position, is_reference, uri_to_path
from kernelblaster.server.editor.kernel_locator import enclosing, locate
from kernelblaster.server.pipeline import write_kernel
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import code_actions


async def code_action(
    ls: KernelBlasterServer, params: types.CodeActionParams
) -> list[types.CodeAction]:
    await ls.ready.wait()  # the actions' disabled reasons follow the settings
    if is_reference(uri_to_path(params.text_document.uri)):
        return _reference_actions(ls, params)
    document, path = ls.kernel_source(params.text_document.uri)
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
