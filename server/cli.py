"""`kernelblaster serve`: the language server on stdio."""

from __future__ import annotations

import argparse
import logging


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the language server (LSP over stdio)",
        description="Run the KernelBlaster language server, speaking LSP on stdin/stdout.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging on stderr (default: WARNING)",
    )
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    from kernelblaster.server.app import server  # imported here: `kernelblaster --help` stays fast

    server.start_io()
    return 0
