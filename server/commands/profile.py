"""`kernelblaster.profile`: a `.cu` run again at once, at the depth asked for."""

from __future__ import annotations

from typing import Any, cast

import msgspec
from pygls.exceptions import JsonRpcInvalidParams

from kernelblaster.harness.protocol.records import ProfileDepth
from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.editor.documents import is_kernel_source, uri_to_path
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.code_actions import PROFILE


class ProfileArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str
    depth: str | None = None


def profile_command(ls: KernelBlasterServer, *args: Any) -> None:
    request = argument(args, ProfileArgs, PROFILE)
    path = uri_to_path(request.uri)
    if request.depth not in (None, "quick", "full"):
        raise JsonRpcInvalidParams(f"{PROFILE}: depth must be 'quick' or 'full'")
    # checked just above (ProfileArgs keeps a str, so that a wrong depth gets that message)
    depth = cast("ProfileDepth | None", request.depth)
    if path is None or not is_kernel_source(path) or not path.is_file():
        raise JsonRpcInvalidParams(f"{PROFILE}: {request.uri} is not a .cu file")
    pipeline.schedule(ls, path, depth, debounce=False)
