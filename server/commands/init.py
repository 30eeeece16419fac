"""`kernelblaster.init`: a first CUDA kernel written for a reference (pipeline/write_kernel.py)."""

from __future__ import annotations

from typing import Any

import msgspec

from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.pipeline import write_kernel
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.code_actions import INIT


async def init_command(ls: KernelBlasterServer, *args: Any) -> dict:
    reply = await write_kernel.write_kernel(ls, argument(args, write_kernel.InitArgs, INIT))
    return msgspec.to_builtins(reply)
