"""`kernelblaster trust`: consent, per folder, that the language server may build and run its
kernels, and per configuration file, to the settings beyond the harmless ones that it sets
(kernelblaster/config_trust.py says which, kernelblaster/trust.py why)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelblaster.settings import CONFIG_FILE, SettingsError, config_references, find_config_dir
from kernelblaster.trust import (
    TrustListError,
    revoke,
    revoke_folder,
    trust,
    trust_folder,
    trusted_files,
    trusted_folders,
)


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
            for path in trusted_folders():
                print(f"{path}{'' if path.endswith('/') else '/'} (workspace folder)")
            return 0
        directory = Path(args.directory).resolve()
        if not directory.is_dir():
            print(
                f"error: {args.directory} is not a folder; pass the repository's", file=sys.stderr
            )
            return 2
        if args.revoke:
            print(f"{'revoked' if revoke_folder(directory) else 'was not trusted'}: {directory}/")
        else:
            trust_folder(directory)
            print(f"trusted: {directory}/ (the language server builds and runs its kernels)")
        for config in _config_files(directory):
            if args.revoke:
                print(f"{'revoked' if revoke(config) else 'was not trusted'}: {config}")
            else:
                named, places = config_references(config, directory)
                trust(config, named, places)
                also = f" and {len(named)} file(s) or folder(s) it names" if named else ""
                print(f"trusted: {config}{also} (as they are now; an edit needs trusting again)")
    except (OSError, SettingsError, TrustListError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trust",
        help="trust a folder: the language server builds and runs its kernels, and its "
        f"{CONFIG_FILE} may set more than the harmless settings (programs, nvcc flags, "
        "endpoints, paths)",
    )
    parser.add_argument("directory", nargs="?", default=".", help="the folder (default: .)")
    parser.add_argument("--revoke", action="store_true", help="withdraw the trust")
    parser.add_argument("--list", action="store_true", help="list what is trusted")
    parser.set_defaults(func=cmd_trust)
