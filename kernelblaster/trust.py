"""Which repository configuration files the user trusts with settings beyond the harmless ones.

A `kernelblaster.toml` (or `[tool.kernelblaster]` in a `pyproject.toml`) can name programs, places
to write, network endpoints and secrets (kernelblaster/config_trust.py says which settings): anyone
who can commit to a repository could make `kernelblaster build` run their program. As direnv does
for `.envrc`, such settings are used only once the user has said so for that exact file:
`kernelblaster trust DIR` records the file's content hash here, with the hash of every file or
folder of the repository those settings name (an options file, a script), and a change to any of
them needs trusting again. `--trust` (or KERNELBLASTER_TRUST_CONFIG=1) trusts for one run. The
editor's Workspace Trust plays this role for the language server.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec
import platformdirs

TRUST_ENV = "KERNELBLASTER_TRUST_CONFIG"


class TrustListError(ValueError):
    """The list of trusted files exists but can't be read."""


def allow_list_path() -> Path:
    return Path(platformdirs.user_config_dir("kernelblaster")) / "trusted-configs.json"


def _digest(path: Path) -> str:
    """The content of a file (as earlier versions recorded it); of a link, also where it
    points; of a folder, its entries' names and its files' contents (nvcc looks a program up in
    a folder by name)."""
    if path.is_file() and not path.is_symlink():
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    digest = hashlib.sha256()
    if path.is_symlink():
        digest.update(f"link to {os.readlink(path)}\0".encode())
    if path.is_dir():
        for entry in sorted(path.iterdir()):
            digest.update(f"{entry.name}\0".encode())
            if entry.is_file():
                digest.update(_digest(entry).encode())
    elif path.is_file():
        digest.update(_digest(path.resolve()).encode())
    return digest.hexdigest()


class _Record(msgspec.Struct):
    """What the user trusted: the configuration file's digest, and the digest of each file or
    folder it names, by path."""

    config: str
    named: dict[str, str] = {}


def _load() -> dict[str, _Record]:
    path = allow_list_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TrustListError(
            f"the trust list {path} can't be read ({exc}); delete it and trust again"
        ) from exc
    if not isinstance(data, dict):
        return {}
    # an entry of an older list (the file's digest alone) still stands for a file naming nothing
    entries = {k: {"config": v} if isinstance(v, str) else v for k, v in data.items()}
    try:
        return msgspec.convert(entries, dict[str, _Record])
    except msgspec.ValidationError as exc:
        raise TrustListError(
            f"the trust list {path} is not one this version wrote ({exc}); delete it and trust "
            "again"
        ) from exc


def _save(entries: dict[str, _Record]) -> None:
    path = allow_list_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    text = json.dumps(msgspec.to_builtins(entries), indent=1, sort_keys=True)
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)  # never a half-written list


def is_trusted(
    config_file: Path, named: list[Path], environ: Mapping[str, str] | None = None
) -> bool:
    """Whether the user trusts this file as it is now, and the files and folders of the
    repository it names (`named`, kernelblaster/config_trust.py) as they are now."""
    environ = os.environ if environ is None else environ
    if environ.get(TRUST_ENV) == "1":
        return True
    recorded = _load().get(str(config_file.resolve()))
    return (
        recorded is not None
        and recorded.config == _digest(config_file)
        and all(recorded.named.get(str(path)) == _digest(path) for path in named)
    )


def trust(config_file: Path, named: list[Path]) -> None:
    """Trust the file and what it names as they are now. What an earlier trust of the same
    content recorded stays (the same file seen from another source's folder names others)."""
    entries = _load()
    key, digest = str(config_file.resolve()), _digest(config_file)
    earlier = entries.get(key)
    kept = earlier.named if earlier is not None and earlier.config == digest else {}
    entries[key] = _Record(digest, {**kept, **{str(path): _digest(path) for path in named}})
    _save(entries)


def revoke(config_file: Path) -> bool:
    entries = _load()
    removed = entries.pop(str(config_file.resolve()), None) is not None
    _save(entries)
    return removed


def trusted_files() -> list[str]:
    return sorted(_load())
