"""The last result of each file, in memory and on disk, so a reopened file (or an editor on a
machine without a GPU) gets its diagnostics, hover and KB suggestions without running anything.

Stored as JSON beside the source (`.kernelblaster/results/<name>.json`), or under the
`cacheDir` setting when set. A file this version can't read is ignored, never trusted."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time
from pathlib import Path

import msgspec

from kernelblaster.folders import BESIDE_FIX, made_folder
from kernelblaster.harness.analysis.classify import kernel_states
from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.server.editor.documents import STATE_DIR

log = logging.getLogger(__name__)

FORMAT = 2  # 2: the states come with the worker's response


class KeptCandidate(msgspec.Struct, kw_only=True):
    """The best verified rewrite of one kernel, written beside the source for "Show diff"."""

    kernel: str
    path: str
    speedup: float | None = None
    techniques: list[str] = []
    base_hash: str  # hash of the text the optimization started from


class FileResult(msgspec.Struct, kw_only=True):
    format: int = FORMAT
    source: str  # absolute path of the .cu file
    text_hash: str  # hash of the text the worker analyzed
    time: float  # epoch seconds when the worker finished
    response: WorkerResponse
    candidates: dict[str, KeptCandidate] = {}
    # The hash of the text the profile and states came from, when not `text_hash`: an earlier
    # version's, kept pinned to its kernels while this version's profile runs (or after it
    # failed), until a new one replaces it.
    profile_hash: str | None = None

    @property
    def profiled_text_hash(self) -> str:
        return self.profile_hash or self.text_hash

    @property
    def states(self) -> dict[str, PerfState]:
        """Kernel name → its state, as the worker classified it (a kernel launched several
        times: its longest launch's, as in the optimization loop)."""
        return kernel_states(self.response.profile, self.response.states)


_decoder = msgspec.json.Decoder(FileResult)


class ResultCache:
    def __init__(self, cache_dir: Path | None = None) -> None:
        self.cache_dir = cache_dir
        self._memory: dict[Path, FileResult] = {}

    def file_for(self, source: Path) -> Path:
        if self.cache_dir is None:
            return source.parent / STATE_DIR / "results" / f"{source.name}.json"
        digest = hashlib.sha256(str(source).encode()).hexdigest()[:16]
        return self.cache_dir / f"{source.name}-{digest}.json"

    def get(self, source: Path) -> FileResult | None:
        """From memory; `load` reads the disk copy."""
        return self._memory.get(source)

    def load(self, source: Path) -> FileResult | None:
        """Memory first, then disk (blocking file I/O: call it off the event loop)."""
        if source in self._memory:
            return self._memory[source]
        path = self.file_for(source)
        try:
            result = _decoder.decode(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("ignoring unreadable cached result %s: %s", path, exc)
            return None
        if result.format != FORMAT or result.source != str(source):
            return None
        return self._memory.setdefault(source, result)

    def put(self, result: FileResult) -> None:
        self._memory[Path(result.source)] = result

    def save(self, result: FileResult) -> None:
        """Write `result` to disk atomically (blocking: call it off the event loop)."""
        path = self.file_for(Path(result.source))
        temporary: str | None = None
        try:
            made_folder(path.parent, fix=BESIDE_FIX)
            fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "wb") as handle:
                handle.write(msgspec.json.encode(result))
            os.replace(temporary, path)
            temporary = None
        except OSError as exc:
            log.warning("could not save the result of %s to %s: %s", result.source, path, exc)
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


def new_result(
    source: Path, text_hash: str, response: WorkerResponse, earlier: FileResult | None = None
) -> FileResult:
    """The result of `response`; when it has no profile of its own but its kernel was verified
    (its profile is still running, or failed), the profile and states of `earlier` (the file's
    previous result) stay, pinned to their kernels as an earlier version's."""
    result = FileResult(
        source=str(source), text_hash=text_hash, time=time.time(), response=response
    )
    check = response.check
    verified = check is not None and check.verify is not None and check.verify.ok
    if response.profile is not None or not verified or earlier is None:
        return result
    if earlier.response.profile is None:
        return result
    result.response = msgspec.structs.replace(
        response, profile=earlier.response.profile, states=earlier.response.states
    )
    result.profile_hash = earlier.profiled_text_hash
    return result
