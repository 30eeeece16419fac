"""Which repository configuration files may name programs for kernelblaster to run.

A `kernelblaster.toml` (or `[tool.kernelblaster]` in a `pyproject.toml`) can set `nvcc`,
`ncu_path`, the worker commands and host-compiler flags: anyone who can commit to a repository
could make `kernelblaster build` run their program. As direnv does for `.envrc`, such settings
are used only once the user has said so for that exact file: `kernelblaster trust DIR` records
the file's content hash here, and an edited file needs trusting again. `--trust` (or
KERNELBLASTER_TRUST_CONFIG=1) trusts for one run. The editor's Workspace Trust plays this role
for the language server.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs

TRUST_ENV = "KERNELBLASTER_TRUST_CONFIG"


class TrustListError(ValueError):
    """The list of trusted files exists but can't be read."""


def allow_list_path() -> Path:
    return Path(platformdirs.user_config_dir("kernelblaster")) / "trusted-configs.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load() -> dict[str, str]:
    path = allow_list_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TrustListError(
            f"the trust list {path} can't be read ({exc}); delete it and trust again"
        ) from exc
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save(entries: dict[str, str]) -> None:
    path = allow_list_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)  # never a half-written list


def is_trusted(config_file: Path, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user trusts this file as it is now."""
    environ = os.environ if environ is None else environ
    if environ.get(TRUST_ENV) == "1":
        return True
    recorded = _load().get(str(config_file.resolve()))
    return recorded is not None and recorded == _digest(config_file)


def trust(config_file: Path) -> None:
    entries = _load()
    entries[str(config_file.resolve())] = _digest(config_file)
    _save(entries)


def revoke(config_file: Path) -> bool:
    entries = _load()
    removed = entries.pop(str(config_file.resolve()), None) is not None
    _save(entries)
    return removed


def trusted_files() -> list[str]:
    return sorted(_load())
