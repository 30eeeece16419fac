"""What is wrong with a file named on the command line, said the same way by every command."""

from __future__ import annotations

from pathlib import Path


def file_problem(given: str) -> str | None:
    """None when `given` is a readable regular file; else what it is instead, and what to do."""
    path = Path(given)
    if path.is_dir():
        return f"{given} is a directory; pass a file in it"
    if not path.exists():
        return f"{given} does not exist"
    if not path.is_file():
        return f"{given} is not a regular file"
    return None
