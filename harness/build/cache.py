"""Build results cached by the content of every input, headers included, so editing an included
header misses. Entries are written in a staging folder and renamed into place: a build killed
half-way leaves none, and two processes storing one entry leave it intact. An unsaved text is keyed
as the file holding it, so saving it makes the save's build a hit."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import msgspec
import psutil

from kernelblaster.folders import CACHE_FIX, made_folder, new_folder_in
from kernelblaster.harness.analysis import nvcc_output, ptxas
from kernelblaster.harness.protocol.records import BuildResult

_FORMAT = "kernelblaster-build-cache-1"
# The modules that turn nvcc's output into a BuildResult's diagnostics and resources: part of every
# key, so a change to how they read it rebuilds instead of serving the old reading.
_READERS: tuple[str, ...] = (nvcc_output.__file__, ptxas.__file__)
_VERSION_TIMEOUT_S = 60.0
_ABANDONED_AFTER_S = 3600.0  # a store takes milliseconds: an older staging dir was abandoned
_nvcc_versions: dict[tuple[str, int], str] = {}


class Manifest(msgspec.Struct, kw_only=True):
    nvcc_version: str
    deps: list[str]  # absolute paths of every file the compiler read, sources included


def nvcc_version(nvcc: str) -> str:
    """`nvcc --version`, asked once per nvcc binary (path and modification time)."""
    resolved = str(Path(nvcc).resolve())
    memo_key = (resolved, Path(resolved).stat().st_mtime_ns)
    if memo_key not in _nvcc_versions:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=_VERSION_TIMEOUT_S
        )
        _nvcc_versions[memo_key] = out.stdout.strip() or out.stderr.strip()
    return _nvcc_versions[memo_key]


@functools.cache
def _readers_digest(readers: tuple[str, ...]) -> str:
    """sha256 over the source of the modules that read nvcc's output (read once a process)."""
    digest = hashlib.sha256()
    for path in readers:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def _file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _content_digest(path: str, texts: Mapping[str, str]) -> str | None:
    """The digest of `path`'s content: `texts[path]` when given (an unsaved edit, hashed as the
    file that holds it once saved), else the file's."""
    if path in texts:
        return hashlib.sha256(texts[path].encode("utf-8")).hexdigest()
    return _file_digest(path)


class BuildCache:
    """Under `<root>/builds/`: `manifests/<manifest key>.json`, the files the last build of these
    inputs read (the key hashes what is known before building), and `<key>/`, one entry (the
    artifact, result.json, deps.json) whose key adds the nvcc version and every file read."""

    def __init__(self, root: Path):
        self.builds = root / "builds"

    def manifest_key(
        self,
        options: list[str],
        sources: list[str],
        texts: Mapping[str, str] = {},
        options_files: Sequence[Path] = (),
    ) -> str:
        """Hash of the options, the files they read more options from (path and content: nvcc's
        dependency output does not list them) and the sources (path and content, or the text
        `texts` gives for that path); ValueError if a source can't be read."""
        digest = hashlib.sha256(_FORMAT.encode() + b"\0" + _readers_digest(_READERS).encode())
        for option in options:
            digest.update(b"\0option\0" + option.encode())
        for path in options_files:  # a missing one: nvcc says so, and nothing is stored
            held = _file_digest(str(path)) or "missing"
            digest.update(f"\0options-file\0{path}\0{held}".encode())
        for source in sources:
            content = _content_digest(source, texts)
            if content is None:
                raise ValueError(f"cannot read {source}")
            digest.update(f"\0source\0{source}\0{content}".encode())
        return digest.hexdigest()

    def _entry_key(
        self,
        manifest_key: str,
        nvcc_version: str,
        deps: list[str],
        texts: Mapping[str, str] = {},
    ) -> str | None:
        """None when one of the dependencies is gone."""
        digest = hashlib.sha256(f"{manifest_key}\0{nvcc_version}".encode())
        for dep in sorted(set(deps)):
            content = _content_digest(dep, texts)
            if content is None:
                return None
            digest.update(f"\0dep\0{dep}\0{content}".encode())
        return digest.hexdigest()

    def _manifest_path(self, manifest_key: str) -> Path:
        return self.builds / "manifests" / f"{manifest_key}.json"

    def lookup(
        self, manifest_key: str, nvcc_version: str | None, texts: Mapping[str, str] = {}
    ) -> BuildResult | None:
        """The cached result for these inputs, if every file they read is unchanged (a file
        `texts` gives an unsaved text of: that text). With no nvcc to ask (`nvcc_version`
        None), the toolkit that built the entry is trusted."""
        try:
            manifest = msgspec.json.decode(
                self._manifest_path(manifest_key).read_bytes(), type=Manifest
            )
        except (OSError, msgspec.DecodeError):
            return None
        key = self._entry_key(
            manifest_key, nvcc_version or manifest.nvcc_version, manifest.deps, texts
        )
        if key is None:
            return None
        try:
            result = msgspec.json.decode(
                (self.builds / key / "result.json").read_bytes(), type=BuildResult
            )
        except (OSError, msgspec.DecodeError):
            return None
        if result.artifact is None or not Path(result.artifact).is_file():
            return None
        return result

    def store(
        self,
        manifest_key: str,
        nvcc_version: str,
        deps: list[str],
        artifact: Path,
        result: BuildResult,
        texts: Mapping[str, str] = {},
    ) -> BuildResult:
        """Move `artifact` into a new entry and record `result` (with its final artifact path
        and key); returns that result. If an identical entry appeared meanwhile, it is kept and
        its result returned. Unreadable deps leave the cache untouched. `texts`: the unsaved
        text of a dep, hashed in place of its file's content."""
        key = self._entry_key(manifest_key, nvcc_version, deps, texts)
        if key is None:
            return result
        final = self.builds / key
        stored = msgspec.structs.replace(result, artifact=str(final / artifact.name), key=key)
        made_folder(self.builds, fix=CACHE_FIX)
        self._remove_abandoned()
        staging = new_folder_in(self.builds, ".staging-", fix=CACHE_FIX)
        try:
            shutil.move(artifact, staging / artifact.name)
            (staging / "deps.json").write_bytes(msgspec.json.encode(sorted(set(deps))))
            (staging / "result.json").write_bytes(msgspec.json.encode(stored))
            os.rename(staging, final)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not (final / "result.json").is_file():
                raise
            stored = msgspec.json.decode((final / "result.json").read_bytes(), type=BuildResult)
        self._write_manifest(manifest_key, Manifest(nvcc_version=nvcc_version, deps=deps))
        return stored

    def keep_uncached(self, artifact: Path, result: BuildResult) -> BuildResult:
        """Move `artifact` where the caller can use it, outside any entry (no lookup finds it);
        for builds whose inputs can't be pinned down. Removed after an hour."""
        made_folder(self.builds, fix=CACHE_FIX)
        self._remove_abandoned()
        directory = new_folder_in(self.builds, ".uncached-", fix=CACHE_FIX)
        shutil.move(artifact, directory / artifact.name)
        return msgspec.structs.replace(result, artifact=str(directory / artifact.name), key="")

    @contextlib.contextmanager
    def building(self, manifest_key: str) -> Iterator[None]:
        """Held while these inputs are built and stored; waits while another process holds it (a
        save of the text its build-ahead is compiling, two rollouts of one candidate), then finds
        the entry."""
        path = made_folder(self.builds.parent / "build-locks", fix=CACHE_FIX) / manifest_key
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes or its holder dies
            yield

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Path]:
        """A new directory for one nvcc run's intermediate files, removed after it. A worker killed
        mid-build can't remove its own, so those whose process is gone are removed here."""
        root = made_folder(self.builds.parent / "build-scratch", fix=CACHE_FIX)
        cutoff = time.time() - _ABANDONED_AFTER_S  # also when its number went to another process
        for directory in root.iterdir():
            owner, _, _ = directory.name.partition("-")
            with contextlib.suppress(OSError):
                gone = owner.isdigit() and not psutil.pid_exists(int(owner))
                if gone or directory.stat().st_mtime < cutoff:
                    shutil.rmtree(directory, ignore_errors=True)
        directory = new_folder_in(root, f"{os.getpid()}-", fix=CACHE_FIX)
        try:
            yield directory
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _remove_abandoned(self) -> None:
        """Staging directories of stores killed before their rename, and old uncached builds."""
        cutoff = time.time() - _ABANDONED_AFTER_S
        for directory in [*self.builds.glob(".staging-*"), *self.builds.glob(".uncached-*")]:
            with contextlib.suppress(OSError):
                if directory.stat().st_mtime < cutoff:
                    shutil.rmtree(directory)

    def _write_manifest(self, manifest_key: str, manifest: Manifest) -> None:
        path = self._manifest_path(manifest_key)
        made_folder(path.parent, fix=CACHE_FIX)
        handle, temporary = tempfile.mkstemp(prefix=".manifest-", dir=path.parent)
        with os.fdopen(handle, "wb") as out:
            out.write(msgspec.json.encode(manifest))
        os.replace(temporary, path)
