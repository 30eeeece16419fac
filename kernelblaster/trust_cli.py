"""`kernelblaster trust`: consent, per configuration file, to the settings beyond the harmless
ones that it sets (kernelblaster/config_trust.py says which, kernelblaster/trust.py why)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelblaster.settings import CONFIG_FILE, SettingsError, config_references, find_config_dir
from kernelblaster.trust import TrustListError, revoke, trust, trusted_files


def _config_files(directory: Path) -> list[Path]:
    found = find_config_dir(directory)
    if found is None:
        return []
    return [f for f in (found / "pyproject.toml", found / CONFIG_FILE) if f.is_file()]


def cmd_trust(args: argparse.Namespace) -> int:
    try:
        if args.list:
            for path in trusted_files():
                print(path)
            return 0
        directory = Path(args.directory).resolve()
        if not directory.is_dir():
            print(
                f"error: {args.directory} is not a folder; pass the repository's", file=sys.stderr
            )
            return 2
        files = _config_files(directory)
        if not files:
            print(
                f"error: no {CONFIG_FILE} or [tool.kernelblaster] at or above {args.directory}: "
                "nothing to trust",
                file=sys.stderr,
            )
            return 2
        for config in files:
            if args.revoke:
                print(f"{'revoked' if revoke(config) else 'was not trusted'}: {config}")
            else:
                named = config_references(config, directory)
                trust(config, named)
                also = f" and {len(named)} file(s) or folder(s) it names" if named else ""
                print(f"trusted: {config}{also} (as they are now; an edit needs trusting again)")
    except (OSError, SettingsError, TrustListError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trust",
        help="let a repository's kernelblaster.toml set more than the harmless settings "
        "(programs, nvcc flags, endpoints, paths)",
    )
    parser.add_argument("directory", nargs="?", default=".", help="the repository (default: .)")
    parser.add_argument("--revoke", action="store_true", help="withdraw the trust")
    parser.add_argument("--list", action="store_true", help="list the trusted files")
    parser.set_defaults(func=cmd_trust)
