"""`kernelblaster.kernelProfile`: the profile view's data for one kernel of an open `.cu`."""

from __future__ import annotations

from typing import Any

import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.editor.documents import text_hash
from kernelblaster.server.editor.kernel_locator import locate
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import profile_view
from kernelblaster.server.views.code_lens import KERNEL_PROFILE


def kernel_profile_command(ls: KernelBlasterServer, *args: Any) -> dict:
    request = argument(args, profile_view.ProfileArgs, KERNEL_PROFILE)
    document, path = ls.kernel_source(request.uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{KERNEL_PROFILE}: {request.uri} is not an open .cu")
    kernel = request.kernel
    if kernel is None:
        spans = locate(document.source)
        if not spans:
            raise JsonRpcInvalidParams(f"{KERNEL_PROFILE}: {path.name} has no kernel")
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
