"""Which repository configuration files the user trusts with settings beyond the harmless ones
(docs/trust.md): as direnv does for `.envrc`, `kernelblaster trust DIR` records the file's
content hash and those of what its settings name, and any change needs trusting again; `--trust`
trusts for one run. The same command records DIR as a trusted workspace folder for a language
client that doesn't say whether its workspace is trusted."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

TRUST_ENV = "KERNELBLASTER_TRUST_CONFIG"


class TrustListError(ValueError):
    """The list of trusted files exists but can't be read."""


def allow_list_path() -> Path:
    return Path(platformdirs.user_config_dir("kernelblaster")) / "trusted-configs.json"


def folder_list_path() -> Path:
    return Path(platformdirs.user_config_dir("kernelblaster")) / "trusted-folders.json"


def _digest(path: Path, within: frozenset[Path] = frozenset()) -> str:
    """The content of a file (as earlier versions recorded it); of a link, also where it
    points; of a folder, the names and digests of everything below it, links followed (nvcc
    looks a program up in a folder by name, and a program there may run its neighbours).
    `within`: the folders being digested, so that a link to one of them is not entered again."""
    if path.is_file() and not path.is_symlink():
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    digest = hashlib.sha256()
    if path.is_symlink():
        digest.update(f"link to {os.readlink(path)}\0".encode())
    target = path.resolve()
    if path.is_symlink() and path.is_file():
        digest.update(_digest(target).encode())
    elif path.is_dir() and target not in within:
        for entry in sorted(path.iterdir()):
            inner = _digest(entry, within | {target})
            digest.update(f"{entry.name}\0{inner}\0".encode())
    return digest.hexdigest()


def _place(path: Path) -> str:
    """A place that is written, as trust covers it: where it resolves to (links followed)."""
    return f"place {path.resolve()}"


class _Record(msgspec.Struct):
    """What the user trusted: the configuration file's digest, and the digest of each file or
    folder it names (of a place written, where it resolves to), by path."""

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
    _write(allow_list_path(), msgspec.to_builtins(entries))


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)  # never a half-written list


def _covered(named: list[Path], places: list[Path]) -> dict[str, str]:
    return {
        **{str(path): _digest(path) for path in named},
        **{str(path): _place(path) for path in places},
    }


def is_trusted(
    config_file: Path,
    named: list[Path],
    places: list[Path],
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether the user trusts this file as it is now, the files and folders of the
    repository it names (`named`, kernelblaster/config_trust.py) as they are now, and the
    places it writes to (`places`) where they are now."""
    environ = os.environ if environ is None else environ
    if environ.get(TRUST_ENV) == "1":
        return True
    recorded = _load().get(str(config_file.resolve()))
    return (
        recorded is not None
        and recorded.config == _digest(config_file)
        and all(recorded.named.get(path) == now for path, now in _covered(named, places).items())
    )


def trust(config_file: Path, named: list[Path], places: list[Path]) -> None:
    """Trust the file, what it names and where it writes as they are now. What an earlier
    trust of the same content recorded stays (the same file seen from another source's folder
    names others)."""
    entries = _load()
    key, digest = str(config_file.resolve()), _digest(config_file)
    earlier = entries.get(key)
    kept = earlier.named if earlier is not None and earlier.config == digest else {}
    entries[key] = _Record(digest, {**kept, **_covered(named, places)})
    _save(entries)


def revoke(config_file: Path) -> bool:
    entries = _load()
    removed = entries.pop(str(config_file.resolve()), None) is not None
    _save(entries)
    return removed


def trusted_files() -> list[str]:
    return sorted(_load())


# --- workspace folders, for the language server ---------------------------------------------


def _folders() -> list[str]:
    path = folder_list_path()
    try:
        return msgspec.json.decode(path.read_bytes(), type=list[str])
    except FileNotFoundError:
        return []
    except (OSError, msgspec.DecodeError) as exc:
        raise TrustListError(
            f"the list of trusted folders {path} can't be read ({exc}); delete it and trust again"
        ) from exc


def trust_folder(folder: Path) -> None:
    _write(folder_list_path(), sorted({*_folders(), str(folder.resolve())}))


def revoke_folder(folder: Path) -> bool:
    folders = _folders()
    key = str(folder.resolve())
    if key in folders:
        _write(folder_list_path(), [kept for kept in folders if kept != key])
    return key in folders


def folder_trusted(folder: Path) -> bool:
    """Whether the user trusts `folder` as a workspace: it, or a folder above it, is on the
    list (as a parent's Workspace Trust covers its subfolders)."""
    here = folder.resolve()
    return any(here.is_relative_to(trusted) for trusted in _folders())


def trusted_folders() -> list[str]:
    return _folders()
