"""What a repository's configuration file may set before the user trusts it, and what that trust
covers (docs/trust.md). Anyone who can commit writes that file, so only an allow-list of harmless
settings applies on its own; every other one, a setting added later included, needs trust. Trust
covers the file and every file or folder inside the repository its settings name; places written
to are covered by where they are."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from kernelblaster.nvcc_flags import Place, options_files, output_values, refused_nvcc_flags

# Settings that decide nothing but how closely to compare, which switches are on and on which
# GPU: harmless from any file.
INERT_SETTINGS = frozenset(
    {
        "arch",  # checked as an architecture name before nvcc sees it (harness/build/nvcc.py)
        "build_on_change",
        "native_profile_driver",
        "native_sanitizer_driver",
        "in_process_counters",
        "atol",
        "rtol",
        "allow_library_calls",
        "gpu_index",
        "llm_timeout_s",
        "code_lens",  # whether the editor shows a lens above each kernel
    }
)
# Settings that spend GPU time, LLM calls or money. Settings bounds each (kernelblaster/
# settings.py); a file may lower them, a value above the default needs trust.
BUDGET_SETTINGS = {
    "trials": "runs each check more times",
    "rollouts": "runs more LLM trajectories, each a chain of LLM calls and GPU runs",
    "depth": "applies more optimizations in a row, each an LLM call and GPU runs",
    "top_k": "ranks more techniques to try",
    "init_attempts": "tries more LLM replies",
    "llm_max_retries": "retries each LLM call more times",
    "parallel_gpu_jobs": "runs more jobs on one GPU at once",
    "build_timeout_s": "lets a build run longer",
    "run_timeout_s": "lets the repository's kernel run longer",
    "profile_timeout_s": "lets a profile run longer",
    "ncu_depth": "profiles every section (several times the GPU time)",
}
_DEPTHS = ("quick", "full")
# Why each other setting needs trust (the message names it). A setting in no list needs trust
# too: the lists of harmless ones are the only ones that let anything through.
RESTRICTED_SETTINGS = {
    "nvcc": "names a program to run",
    "ncu_path": "names a program to run",
    "compute_sanitizer_path": "names a program to run",
    "worker_command": "names a program to run",
    "optimize_worker_command": "names a program to run",
    "llm_base_url": "decides where your prompts and API key are sent",
    "llm_api_key_env": "decides which environment variable is sent as the API key",
    "llm_model": "decides which model your API key pays for",
    "kb_path": "decides where your knowledge base is written (or which server it goes to)",
    "cache_dir": "decides where builds are written",
}
# Settings naming a place that is written: trusted by where it is (kernelblaster/trust.py)
WRITTEN_SETTINGS = ("kb_path", "cache_dir")
# A target's keys: its files must be inside the repository (the kernel and its reference are
# the repository's own code, which `check` runs by design); its flags pass the nvcc allow-list.
TARGET_FILES = ("source", "reference", "bindings", "golden")
_INERT_TARGET_KEYS = frozenset(
    {"entry", "kind", "args", "atol", "rtol", "allow_library_calls", *TARGET_FILES}
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
    words: list[str]  # the words of those settings' values whose contents trust covers
    places: list[Path]  # the places written that trust covers by where they are


def assess(
    table: dict[str, Any], config_dir: Path, start: Path | None, defaults: Mapping[str, Any]
) -> Assessment:
    """What in a configuration file's table (already checked against Settings' types) needs
    the user's trust. `config_dir`: the configuration file's folder; `start`: the source (or
    folder) being worked on; `defaults`: each setting's default."""
    place = Place(repository_of(config_dir).resolve(), bases(table, config_dir, start))
    assessment = Assessment([], [], [])
    for key, value in table.items():
        if key in INERT_SETTINGS or value == defaults.get(key):
            continue
        if key in BUDGET_SETTINGS:
            if _above(key, value, defaults[key]):
                why = f"above its default {defaults[key]!r}: it {BUDGET_SETTINGS[key]}"
                assessment.problems.append(f"{key} = {value!r} ({why})")
        elif key == "nvcc_flags":
            _assess_flags(assessment, key, value, place)
        elif key == "targets":
            for number, target in enumerate(value):
                _assess_target(assessment, f"targets[{number}]", target, config_dir, place)
        else:
            why = RESTRICTED_SETTINGS.get(key, "is not known to be harmless")
            assessment.problems.append(f"{key} = {value!r} ({why})")
            if key in WRITTEN_SETTINGS:
                assessment.places.append(Path(os.path.normpath(config_dir / value)))
            else:
                assessment.words.extend(_strings(value))
    return assessment


def _above(key: str, value: Any, default: Any) -> bool:
    """Whether `value` (as a file spells it: "5" converts too) spends more than `default`."""
    if key == "ncu_depth":
        return _DEPTHS.index(value) > _DEPTHS.index(default)
    return type(default)(value) > default


def bases(table: dict[str, Any], config_dir: Path, start: Path | None) -> tuple[Path, ...]:
    """The folders nvcc may run in for this configuration (it resolves relative paths from
    the source's folder): the configuration's, `start`'s (a source, or a folder) and each
    target source's."""
    found = {config_dir}
    if start is not None:
        found.add(start if start.is_dir() else start.parent)
    for target in table.get("targets", []):
        if isinstance(target, dict) and isinstance(target.get("source"), str):
            found.add((config_dir / target["source"]).parent)
    return tuple(sorted(found))


def _assess_flags(assessment: Assessment, key: str, flags: list[str], place: Place) -> None:
    refused = refused_nvcc_flags(flags, place)
    if refused:
        assessment.problems.append(
            f"{key} with {', '.join(' '.join(words) for words in refused)} (nvcc flags beyond "
            "code generation, macros, warnings and include folders inside the repository)"
        )
        words = [word for group in refused for word in group]
        # where nvcc writes is covered by the file's text; what it reads, by its contents
        written = set(output_values(words))
        assessment.words.extend(word for word in words if word not in written)


def _assess_target(
    assessment: Assessment, where: str, target: dict[str, Any], config_dir: Path, place: Place
) -> None:
    for key, value in target.items():
        if key == "nvcc_flags":
            _assess_flags(assessment, f"{where}.nvcc_flags", value, place)
        elif key not in _INERT_TARGET_KEYS:
            assessment.problems.append(f"{where}.{key} = {value!r} (is not known to be harmless)")
            assessment.words.extend(_strings(value))
        elif key in TARGET_FILES and not _within(config_dir / value, place.repository):
            assessment.problems.append(f"{where}.{key} = {value!r} (a file outside the repository)")
            assessment.words.append(value)


def _within(path: Path, repository: Path) -> bool:
    return path.resolve().is_relative_to(repository)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# --- what trust covers -----------------------------------------------------------------------

_SEPARATORS = re.compile(r"[=,]")
_OPTIONS_FILE_LIMIT = 1 << 20  # bytes read of one options file
_OPTIONS_FILE_DEPTH = 4  # options files naming options files, at most this deep


def referenced_paths(words: list[str], repository: Path, folders: tuple[Path, ...]) -> list[Path]:
    """The files and folders inside `repository` that `words` (an assessment's) name, each
    word whole and in its `=`/`,`-separated parts, looked up from each of `folders`; and, in
    turn, what the options files and response files among them name (an options file can hold
    `-ccbin tools`, whose programs are what runs)."""
    found: set[Path] = set()
    pending: list[str] = words
    read: set[Path] = set()
    for _ in range(_OPTIONS_FILE_DEPTH + 1):
        named = _named(pending, repository, folders)
        found |= named
        sources = {path for path in _option_sources(pending, folders) & named if path.is_file()}
        pending = [word for path in sorted(sources - read) for word in _words_of(path)]
        read |= sources
    return sorted(found)


def _named(words: list[str], repository: Path, folders: tuple[Path, ...]) -> set[Path]:
    found = set()
    for word in words:
        for piece in {word, *_SEPARATORS.split(word)}:
            name = piece.lstrip("@")  # a host compiler's @file holds options
            for folder in folders:
                # Lexically, links not followed: a link in the repository is named by its own
                # path, and its target is part of its digest (kernelblaster/trust.py).
                path = Path(os.path.normpath(folder / name))
                if name and path.is_relative_to(repository) and path.exists():
                    found.add(path)
    return found


def _option_sources(words: list[str], folders: tuple[Path, ...]) -> set[Path]:
    """The files `words` name that hold more options: nvcc's options files, and response
    files (`@file`, which gcc and the linker read)."""
    response = {
        piece[1:] for word in words for piece in _SEPARATORS.split(word) if piece.startswith("@")
    }
    named = [path for folder in folders for path in options_files(words, folder)]
    named += [folder / name for name in response if name for folder in folders]
    return {Path(os.path.normpath(path)) for path in named}


def _words_of(path: Path) -> list[str]:
    """The words of an options file, as its reader splits them (quotes honoured)."""
    with path.open("rb") as handle:
        text = handle.read(_OPTIONS_FILE_LIMIT).decode("utf-8", errors="replace")
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: its words as blanks separate them
        return text.split()
