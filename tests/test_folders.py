"""kernelblaster/folders.py, the one owner of the folders KernelBlaster writes to: made when
missing, and one FolderError (which folder, why, the fix) for each way making one fails."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelblaster.folders import (
    CACHE_FIX,
    FolderError,
    made_folder,
    new_folder_in,
    scratch_folder,
)
from kernelblaster.settings import Settings


def test_a_missing_folder_is_made_with_its_parents(tmp_path):
    path = tmp_path / "a" / "b" / "c"
    assert made_folder(path, fix=CACHE_FIX) == path and path.is_dir()
    assert made_folder(path, fix=CACHE_FIX) == path  # and taken as it is the next time


def test_the_cache_folders_are_made_under_cache_dir(tmp_path):
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    work = settings.cache_folder("work")
    assert work == tmp_path / "cache" / "work" and work.is_dir()
    assert settings.cache_folder() == tmp_path / "cache"


@pytest.mark.parametrize("depth", [0, 2])
def test_a_file_in_the_way_is_named_with_its_fix(tmp_path, depth):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    path = blocker.joinpath(*["sub"] * depth)
    with pytest.raises(FolderError) as raised:
        made_folder(path, fix=CACHE_FIX)
    error = raised.value
    assert error.path == path and error.why == f"{blocker} is a file, not a folder"
    assert error.fix == f"Remove {blocker}, or: {CACHE_FIX}"
    assert str(error) == f"Cannot use the folder {path}: {error.why}. {error.fix}."


def test_a_full_disk_says_so(tmp_path, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(FolderError) as raised:
        made_folder(tmp_path / "new", fix=CACHE_FIX)
    assert raised.value.why == "the disk is full"
    assert raised.value.fix.startswith("Free space on it, or: Set cache_dir")


def test_a_read_only_file_system_says_so(tmp_path, monkeypatch):
    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(FolderError, match="it is on a read-only file system"):
        made_folder(tmp_path / "new", fix=CACHE_FIX)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_without_write_permission_names_where(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(FolderError) as raised:
            made_folder(locked / "cache", fix=CACHE_FIX)
        assert raised.value.why == f"permission denied (in {locked})"
        with pytest.raises(FolderError, match="not writable by this user"):
            made_folder(locked, fix=CACHE_FIX)
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr (e2fsprogs)")
def test_an_existing_folder_that_cannot_be_written_says_so(tmp_path):
    """An immutable folder (read-only even for root, which CI runs as): not writable, unless
    the caller only reads there (the knowledge base opens its file read-only)."""
    folder = tmp_path / "immutable"
    folder.mkdir()
    if subprocess.run(["chattr", "+i", str(folder)], check=False).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        with pytest.raises(FolderError) as raised:
            made_folder(folder, fix=CACHE_FIX)
        assert made_folder(folder, fix=CACHE_FIX, writable=False) == folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert raised.value.why == "it is not writable by this user"
    assert raised.value.fix == f"Make it writable, or: {CACHE_FIX}"


def test_scratch_folders_are_new_each_time_and_removed_after(tmp_path):
    parent = tmp_path / "work"  # missing: made
    with (
        scratch_folder(parent, "sanitize-", fix=CACHE_FIX) as one,
        scratch_folder(parent, "sanitize-", fix=CACHE_FIX) as two,
    ):
        assert one != two and one.is_dir() and two.is_dir()
        assert one.parent == parent and one.name.startswith("sanitize-")
    assert list(parent.iterdir()) == []
    kept = new_folder_in(parent, "staging-", fix=CACHE_FIX)
    assert kept.is_dir()  # the caller's to remove


def test_the_error_crosses_a_process_boundary_whole(tmp_path):
    """Raised in the clean reference process (the baselines' cache), raised again in the
    worker: pickled with its path, why and fix."""
    error = FolderError(tmp_path, "the disk is full", CACHE_FIX)
    again = pickle.loads(pickle.dumps(error))
    assert (again.path, again.why, again.fix, str(again)) == (
        error.path,
        error.why,
        error.fix,
        str(error),
    )
    assert isinstance(again, OSError)
