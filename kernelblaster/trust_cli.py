"""`kernelblaster trust`: consent, per configuration file, to the programs it names
(kernelblaster/trust.py says why)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelblaster.settings import CONFIG_FILE, SettingsError, find_config_dir
from kernelblaster.trust import TrustListError, revoke, trust, trusted_files


def _config_files(directory: Path) -> list[Path]:
    found = find_config_dir(directory.resolve())
    if found is None:
        return []
    return [f for f in (found / "pyproject.toml", found / CONFIG_FILE) if f.is_file()]


def cmd_trust(args: argparse.Namespace) -> int:
    try:
        if args.list:
            for path in trusted_files():
                print(path)
            return 0
        files = _config_files(Path(args.directory))
        if not files:
            print(f"error: no {CONFIG_FILE} or [tool.kernelblaster] at or above {args.directory}")
            return 2
        for config in files:
            if args.revoke:
                print(f"{'revoked' if revoke(config) else 'was not trusted'}: {config}")
            else:
                trust(config)
                print(f"trusted: {config} (as it is now; an edit needs trusting again)")
    except (OSError, SettingsError, TrustListError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trust",
        help="let a repository's kernelblaster.toml name programs to run (nvcc, ncu, workers)",
    )
    parser.add_argument("directory", nargs="?", default=".", help="the repository (default: .)")
    parser.add_argument("--revoke", action="store_true", help="withdraw the trust")
    parser.add_argument("--list", action="store_true", help="list the trusted files")
    parser.set_defaults(func=cmd_trust)
