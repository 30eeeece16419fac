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
from typing import NoReturn

from kernelblaster import __version__
from kernelblaster.folders import FolderError
from kernelblaster.trust import TRUST_ENV

# Each command and the module that registers it. Only the running command's module is
# imported, so `kernelblaster serve` (the editor's process) never loads the LLM side
# (kernelblaster.agents); `--help`, or a word that names no command, imports them all.
COMMANDS = {
    "build": "kernelblaster.check_cli",
    "check": "kernelblaster.check_cli",
    "kb": "kernelblaster.kb.cli",
    "analyze": "kernelblaster.profile_cli",
    "profile": "kernelblaster.profile_cli",
    "optimize": "kernelblaster.agents.optimize_cli",
    "init": "kernelblaster.agents.init_cli",
    "bench": "kernelblaster.agents.bench_cli",
    "serve": "kernelblaster.server.cli",
    "trust": "kernelblaster.trust_cli",
}


def _modules_for(argv: list[str]) -> list[str]:
    # The first word that is no option is the command (the top-level options take no value).
    command = next((word for word in argv if not word.startswith("-")), None)
    if command in COMMANDS:
        return [COMMANDS[command]]
    return list(dict.fromkeys(COMMANDS.values()))


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line saying where to read more, and exit status 2, for every
    command and subcommand (argparse makes subparsers of the parser's own class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv` (default: sys.argv[1:]): with its command's subparsers, or all."""
    parser = _Parser(
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
    for module_name in _modules_for(sys.argv[1:] if argv is None else argv):
        importlib.import_module(module_name).register(subparsers)
    return parser


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    # SystemExit unwinds like Ctrl-C does, so the `finally` blocks that kill the workers (and
    # the compilers and kernels below them) run; the default SIGTERM action would skip them.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
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
    except FolderError as exc:  # a folder of ours this process writes (a worker's are its own)
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
