"""`kernelblaster.showDiff`: a kernel's kept candidate shown against the source."""

from __future__ import annotations

from typing import Any

from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.pipeline import optimize
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.code_actions import SHOW_DIFF


async def show_diff_command(ls: KernelBlasterServer, *args: Any) -> None:
    await optimize.show_diff(ls, argument(args, optimize.ShowDiffArgs, SHOW_DIFF))
