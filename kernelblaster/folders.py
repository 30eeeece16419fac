"""The one owner of the folders KernelBlaster writes to (the cache and the folders in it, the KB's,
the editor's state beside a file). Each is made when it is used, since a fresh machine has none
and a user may clear the cache meanwhile, and checked to be writable. One that can't be made is a
`FolderError` naming the folder, why, and what to do."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# What to do when a folder of the cache can't be made, and when the knowledge base's can't.
CACHE_FIX = (
    "Set cache_dir (KERNELBLASTER_CACHE_DIR, or kernelblaster.cacheDir in the editor) to a "
    "folder you can write, or XDG_CACHE_HOME for every program's cache"
)
KB_FIX = (
    "Set kb_path (KERNELBLASTER_KB, or kernelblaster.kbPath in the editor) to a file in a "
    "folder you can write, or XDG_DATA_HOME"
)
BESIDE_FIX = (
    "Make the source's folder writable: the editor keeps its results, timing history and "
    "candidates in .kernelblaster/ beside the source"
)


class FolderError(OSError):
    """A folder KernelBlaster needs could not be made or is not writable. An OSError, so the
    callers that carry on without a folder (the editor's result cache) still do; its message
    says which folder, why, and the fix."""

    def __init__(self, path: Path, why: str, fix: str) -> None:
        self.path, self.why, self.fix = path, why, fix
        super().__init__(f"Cannot use the folder {path}: {why}. {fix}.")

    def __reduce__(self):  # raised in the clean reference process, raised again in the worker
        return (type(self), (self.path, self.why, self.fix))

    @property
    def message(self) -> str:
        return f"KernelBlaster cannot use the folder {self.path}: {self.why}."


def made_folder(path: Path, *, fix: str, writable: bool = True) -> Path:
    """`path`, made (with its parents) when missing, and writable unless `writable` is False
    (the knowledge base opens its file read-only in a folder it can't write); else
    FolderError. `fix`: the setting that moves it (CACHE_FIX, KB_FIX, ...); the error adds
    what the cause needs."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _folder_error(path, exc, fix) from exc
    if not path.is_dir():  # mkdir(exist_ok) already refuses a file; a dangling link is not a dir
        raise FolderError(path, "it is not a folder", f"Remove it, or: {fix}")
    if writable and not os.access(path, os.W_OK | os.X_OK):
        raise FolderError(path, "it is not writable by this user", f"Make it writable, or: {fix}")
    return path


def new_folder_in(parent: Path, prefix: str, *, fix: str) -> Path:
    """A new, empty folder of a name of its own in `parent` (made when missing): the caller's
    to remove."""
    made_folder(parent, fix=fix)
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise _folder_error(parent, exc, fix) from exc


@contextlib.contextmanager
def scratch_folder(parent: Path, prefix: str, *, fix: str) -> Iterator[Path]:
    """A new folder in `parent` (made when missing) for the body, removed after it."""
    scratch = new_folder_in(parent, prefix, fix=fix)
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _folder_error(path: Path, exc: OSError, fix: str) -> FolderError:
    """What `exc`, met making `path`, means, and what to do about it."""
    if exc.errno == errno.ENOSPC:
        return FolderError(path, "the disk is full", f"Free space on it, or: {fix}")
    if exc.errno == errno.EDQUOT:
        return FolderError(path, "the disk quota is used up", f"Free space, or: {fix}")
    if exc.errno == errno.EROFS:
        return FolderError(path, "it is on a read-only file system", fix)
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        blocking = _file_in_the_way(path)
        if blocking is not None:
            return FolderError(
                path, f"{blocking} is a file, not a folder", f"Remove {blocking}, or: {fix}"
            )
    if exc.errno in (errno.EACCES, errno.EPERM):
        where = _nearest_existing(path)
        return FolderError(
            path, f"permission denied (in {where})", f"Make {where} writable, or: {fix}"
        )
    return FolderError(path, exc.strerror or str(exc), fix)


def _file_in_the_way(path: Path) -> Path | None:
    """The first of `path` and its parents that exists and is no folder."""
    for candidate in [*reversed(path.parents), path]:
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return None


def _nearest_existing(path: Path) -> Path:
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return candidate
    return path
