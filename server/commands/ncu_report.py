"""`kernelblaster.ncuReport`: the file's latest kept Nsight Compute report, to open in ncu-ui."""

from __future__ import annotations

from typing import Any

import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.editor.documents import is_kernel_source, uri_to_path
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import profile_view
from kernelblaster.server.views.code_lens import NCU_REPORT


def ncu_report_command(ls: KernelBlasterServer, *args: Any) -> dict:
    request = argument(args, profile_view.ProfileArgs, NCU_REPORT)
    path = uri_to_path(request.uri)
    if not is_kernel_source(path):
        raise JsonRpcInvalidParams(f"{NCU_REPORT}: {request.uri} is not a .cu file")
    assert path is not None
    answer = profile_view.ncu_report(ls.history.latest_report(path), path)
    if request.show:
        ls.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Info, message=answer.message)
        )
    return msgspec.to_builtins(answer)
