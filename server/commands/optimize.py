"""`kernelblaster.optimize`: the optimize loop run on one kernel (pipeline/optimize.py)."""

from __future__ import annotations

from typing import Any

import msgspec

from kernelblaster.server.commands.arguments import argument
from kernelblaster.server.pipeline import optimize
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.code_actions import OPTIMIZE


async def optimize_command(ls: KernelBlasterServer, *args: Any) -> dict:
    outcome = await optimize.optimize_kernel(ls, argument(args, optimize.OptimizeArgs, OPTIMIZE))
    return msgspec.to_builtins(outcome)
