"""The `kernelblaster` command. Each feature registers its own subcommands; this only wires them.

Every command module exposes `register(subparsers)`, which adds its parsers and sets
`func(args) -> int` on each. Command modules must stay light to import (no torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

from kernelblaster import __version__
from kernelblaster.trust import TRUST_ENV

COMMAND_MODULES = [
    "kernelblaster.harness.cli",
    "kernelblaster.kb.cli",
    "kernelblaster.agents.cli",
    "kernelblaster.agents.optimize_cli",
    "kernelblaster.server.cli",
    "kernelblaster.trust_cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelblaster",
        description="Profile, explain and optimize CUDA kernels.",
    )
    parser.add_argument("--version", action="version", version=f"kernelblaster {__version__}")
    parser.add_argument(
        "--trust",
        action="store_true",
        help="use programs named in this repository's configuration file for this run "
        "(see `kernelblaster trust`)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    # SystemExit unwinds like Ctrl-C does, so the `finally` blocks that kill the workers (and
    # the compilers and kernels below them) run; the default SIGTERM action would skip them.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.trust:
        os.environ[TRUST_ENV] = "1"
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # `kernelblaster ... | head` closed our stdout: stop quietly, as `cat` would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
