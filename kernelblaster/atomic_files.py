"""Writing a user's file (a kernel, a KB export) in one step: a crash leaves the old file or the
new one, never half of one. Shared by the CLI commands and the language server, which write
kernels the same way; torch-free and free of the LLM stack."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one step: a crash leaves the old file or the new one, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def save_file(path: Path, text: str, *, force: bool) -> None:
    """Write `path` in one step: a crash leaves no half-written file. Without `force` an
    existing file is never replaced, not even one created after the caller looked: the new
    file is linked into place, which fails when the name exists (FileExistsError)."""
    if force:
        write_atomically(path, text)
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
