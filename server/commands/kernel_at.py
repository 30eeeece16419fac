"""`kernelblaster.kernelAt`: the kernel a command at a position is about, for the editor's
commands that take one."""

from __future__ import annotations

from typing import Any

import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.editor.documents import to_client_range
from kernelblaster.server.editor.kernel_locator import kernel_meant, locate
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.code_actions import KERNEL_AT


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


def kernel_at_command(ls: KernelBlasterServer, *args: Any) -> dict:
    request = argument(args, KernelAtArgs, KERNEL_AT)
    document = ls.workspace.text_documents.get(request.uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{KERNEL_AT}: {request.uri} is not open")
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
