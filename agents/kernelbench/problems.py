"""Finding KernelBench problems: the `*.py` files of a folder that define `class Model`,
`get_inputs()` and `get_init_inputs()`, in upstream's numeric order. Read as text, never
imported: user code runs only in the harness's worker. A starting kernel may be given as
`<stem>.cu` beside the problem or under --start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from kernelblaster.harness.analysis.reference_source import outline
from kernelblaster.harness.target.pairing import kernel_beside

_LEADING_NUMBER = re.compile(r"^(\d+)")


class ProblemsError(ValueError):
    """No problems where the user pointed, or a file that is not one; the message says which."""


class Problem(NamedTuple):
    path: Path  # the problem .py
    start: Path | None  # a .cu to start from instead of `init`

    @property
    def name(self) -> str:
        return self.path.stem


def is_problem(text: str) -> bool:
    """A KernelBench problem (reference) file, not a solution (`ModelNew`)."""
    found = outline(text)
    return found is not None and found.is_problem


def _order(path: Path) -> tuple[int, str]:
    number = _number(path)
    return (int(number) if number else 1 << 30, path.stem)


def _problem_files(path: Path) -> list[Path]:
    if path.is_dir():
        found = [p for p in path.glob("*.py") if is_problem(p.read_text("utf-8", "replace"))]
        if not found:
            raise ProblemsError(
                f"{path} holds no KernelBench problem files (a .py with class Model, "
                "get_inputs() and get_init_inputs())"
            )
        return sorted(found, key=_order)
    if not path.is_file():
        raise ProblemsError(f"{path} does not exist")
    if not is_problem(path.read_text("utf-8", "replace")):
        raise ProblemsError(
            f"{path} is not a KernelBench problem file (class Model, get_inputs(), "
            "get_init_inputs(); a solution with ModelNew is not a problem)"
        )
    return [path]


def _start_for(problem: Path, start_dir: Path | None) -> Path | None:
    places = [kernel_beside(problem, start_dir)] if start_dir else []
    return next((p for p in [*places, kernel_beside(problem)] if p.is_file()), None)


def _number(path: Path) -> str | None:
    match = _LEADING_NUMBER.match(path.stem)
    return match.group(1) if match else None


def discover(
    paths: list[Path],
    *,
    start_dir: Path | None = None,
    only: list[str] | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """The problems in `paths` (folders or files), in order; `only`: problem numbers or stems
    to keep (e.g. ["19", "23_Softmax"]); `limit`: the first N of those."""
    files: list[Path] = []
    for path in paths:
        files += [f for f in _problem_files(path.resolve()) if f not in files]
    if only:
        wanted = set(only)
        files = [f for f in files if f.stem in wanted or _number(f) in wanted]
        if not files:
            raise ProblemsError(f"no problem matches --only {','.join(only)}")
    if limit is not None:
        files = files[:limit]
    return [Problem(path=f, start=_start_for(f, start_dir)) for f in files]


def level_name(paths: list[Path]) -> str:
    """The level a run is filed under: the folder's name (`level1`), or a single file's
    folder's."""
    folders = {(p if p.is_dir() else p.parent).resolve().name for p in paths}
    if len(folders) != 1:
        raise ProblemsError(
            f"the problems come from several folders ({', '.join(sorted(folders))}); name the "
            "level the results are filed under with --level"
        )
    return folders.pop()
