"""What a repository's configuration file may set before the user trusts it, and what that
trust covers.

Anyone who can commit to a repository writes its `kernelblaster.toml` (or the
`[tool.kernelblaster]` table of its `pyproject.toml`). So the settings such a file may set on its
own are an allow-list of ones known to be harmless: tolerances, budgets, timeouts, trial counts,
which GPU, and nvcc flags that only change the code generated (kernelblaster/nvcc_flags.py).
Every other setting — one added to Settings later included — needs the user's trust
(kernelblaster/trust.py), because it names a program to run, a place to write, where network
traffic goes, or which environment variable holds a secret.

Trust covers the file as it is and every file or folder inside the repository that its
restricted settings name (an options file, a host-compiler folder, a worker script): a change
to any of them needs trusting again. Relative names are looked up from the configuration file's
folder and from the folder of the source being built, where nvcc resolves them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from kernelblaster.nvcc_flags import refused_nvcc_flags

# Settings that decide nothing but how hard or how long to try, how closely to compare, and on
# which GPU: harmless from any file.
INERT_SETTINGS = frozenset(
    {
        "arch",  # checked as an architecture name before nvcc sees it (harness/build/nvcc.py)
        "build_on_change",
        "ncu_depth",
        "native_profile_driver",
        "native_sanitizer_driver",
        "in_process_counters",
        "build_timeout_s",
        "run_timeout_s",
        "profile_timeout_s",
        "trials",
        "atol",
        "rtol",
        "allow_library_calls",
        "gpu_index",
        "parallel_gpu_jobs",
        "llm_model",  # a name sent to the user's own endpoint
        "llm_timeout_s",
        "llm_max_retries",
        "init_attempts",
        "rollouts",
        "depth",
        "top_k",
        "code_lens",  # whether the editor shows a lens above each kernel
    }
)
# Why each other setting needs trust (the message names it). A setting in neither list needs
# trust too: the list of harmless ones is the only one that lets anything through.
RESTRICTED_SETTINGS = {
    "nvcc": "names a program to run",
    "ncu_path": "names a program to run",
    "compute_sanitizer_path": "names a program to run",
    "worker_command": "names a program to run",
    "optimize_worker_command": "names a program to run",
    "llm_base_url": "decides where your prompts and API key are sent",
    "llm_api_key_env": "decides which environment variable is sent as the API key",
    "kb_path": "decides where your knowledge base is written (or which server it goes to)",
    "cache_dir": "decides where builds are written",
}
# A target's keys: its files must be inside the repository (the kernel and its reference are
# the repository's own code, which `check` runs by design); its flags pass the nvcc allow-list.
_TARGET_FILES = ("source", "reference", "bindings", "golden")
_INERT_TARGET_KEYS = frozenset(
    {"entry", "kind", "args", "atol", "rtol", "allow_library_calls", *_TARGET_FILES}
)


def repository_of(config_dir: Path) -> Path:
    """The repository a configuration file belongs to: the nearest folder at or above it with
    `.git` (a folder, or a worktree's file), else the configuration file's own folder."""
    for folder in (config_dir, *config_dir.parents):
        if (folder / ".git").exists():
            return folder
    return config_dir


class Assessment(NamedTuple):
    problems: list[str]  # `setting = value (why)` for each setting that needs trust
    words: list[str]  # every word of those settings' values (what trust must cover)


def assess(table: dict[str, Any], config_dir: Path) -> Assessment:
    """What in a configuration file's table (already checked against Settings' types) needs
    the user's trust. `config_dir`: the configuration file's folder."""
    repository = repository_of(config_dir)
    assessment = Assessment([], [])
    for key, value in table.items():
        if key in INERT_SETTINGS:
            continue
        if key == "nvcc_flags":
            _assess_flags(assessment, key, value, repository)
        elif key == "targets":
            for number, target in enumerate(value):
                where = f"targets[{number}]"
                _assess_target(assessment, where, target, config_dir, repository)
        else:
            why = RESTRICTED_SETTINGS.get(key, "is not known to be harmless")
            assessment.problems.append(f"{key} = {value!r} ({why})")
            assessment.words.extend(_strings(value))
    return assessment


def _assess_flags(assessment: Assessment, key: str, flags: list[str], repository: Path) -> None:
    refused = refused_nvcc_flags(flags, repository)
    if refused:
        assessment.problems.append(
            f"{key} with {', '.join(' '.join(words) for words in refused)} (nvcc flags beyond "
            "code generation, macros, warnings and include folders inside the repository)"
        )
        assessment.words.extend(word for words in refused for word in words)


def _assess_target(
    assessment: Assessment, where: str, target: dict[str, Any], config_dir: Path, repository: Path
) -> None:
    for key, value in target.items():
        if key == "nvcc_flags":
            _assess_flags(assessment, f"{where}.nvcc_flags", value, repository)
        elif key not in _INERT_TARGET_KEYS:
            assessment.problems.append(f"{where}.{key} = {value!r} (is not known to be harmless)")
            assessment.words.extend(_strings(value))
        elif key in _TARGET_FILES and not _within(config_dir / value, repository):
            assessment.problems.append(f"{where}.{key} = {value!r} (a file outside the repository)")
            assessment.words.append(value)


def _within(path: Path, repository: Path) -> bool:
    return path.resolve().is_relative_to(repository.resolve())


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# --- what trust covers -----------------------------------------------------------------------

_SEPARATORS = re.compile(r"[=,]")


def referenced_paths(
    words: list[str], table: dict[str, Any], config_dir: Path, start: Path | None
) -> list[Path]:
    """The files and folders inside the repository that `words` (an assessment's) name, each
    word whole and in its `=`/`,`-separated parts, looked up from the configuration file's
    folder, from `start`'s (a source, or a folder) and from each target source's."""
    repository = repository_of(config_dir)
    bases = {config_dir}
    if start is not None:
        bases.add(start if start.is_dir() else start.parent)
    for target in table.get("targets", []):
        bases.add((config_dir / target["source"]).parent)
    found = set()
    for word in words:
        for piece in {word, *_SEPARATORS.split(word)}:
            name = piece.lstrip("@")  # a host compiler's @file holds options
            for base in bases:
                # Lexically, links not followed: a link in the repository is named by its own
                # path, and its target is part of its digest (kernelblaster/trust.py).
                path = Path(os.path.normpath(base / name))
                if name and path.is_relative_to(repository) and path.exists():
                    found.add(path)
    return sorted(found)
