"""Which documents the server handles, and how it names them: URIs ⇄ paths, content hashes,
and ranges converted to the position encoding negotiated with the client."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace.position_codec import PositionCodec

from kernelblaster.harness.target.pairing import REFERENCE_SUFFIX

KERNEL_SUFFIXES = frozenset({".cu", ".cuh"})
KERNEL_LANGUAGE_IDS = frozenset({"cuda-cpp", "cuda"})
BINDINGS_SUFFIX = ".cpp"  # an extension's bindings beside its kernels (harness/target/targets.py)
# Where the server keeps what it writes beside a source (results, candidates); never watched.
STATE_DIR = ".kernelblaster"


def uri_to_path(uri: str) -> Path | None:
    """The local path of a `file:` URI, or None for anything else (untitled, remote, garbage)."""
    if not uri.startswith("file:"):
        return None
    path = to_fs_path(uri)
    return Path(path) if path else None


def path_to_uri(path: Path) -> str:
    return from_fs_path(str(path)) or path.as_uri()


def is_kernel_source(path: Path | None, language_id: str | None = None) -> bool:
    if path is None:
        return False
    return path.suffix in KERNEL_SUFFIXES or (language_id or "") in KERNEL_LANGUAGE_IDS


def is_reference(path: Path | None) -> bool:
    """A Python file: a kernel's reference, or one to write a kernel for (never diagnosed)."""
    return path is not None and path.suffix == REFERENCE_SUFFIX


def is_header(path: Path) -> bool:
    return path.suffix == ".cuh"


def in_state_dir(path: Path) -> bool:
    return STATE_DIR in path.parts


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def same_source(reported: str, local: Path) -> bool:
    """Whether a file named in a tool's output is `local`.

    The worker may run elsewhere (a container, another host via `workerCommand`), where the same
    file lives under another directory: a reported path that doesn't exist here matches by name."""
    reported_path = Path(reported)
    if reported_path == local:
        return True
    if reported_path.name != local.name:
        return False
    try:
        return reported_path.resolve() == local.resolve() or not reported_path.exists()
    except OSError:
        return False


def line_range(
    lines: Sequence[str], line: int, start: int = 0, end: int | None = None
) -> types.Range:
    """A range on one line (0-based, Python character columns), clamped to the text; `end`
    defaults to the end of the line."""
    if not lines:
        return types.Range(types.Position(0, 0), types.Position(0, 0))
    line = min(max(line, 0), len(lines) - 1)
    text = lines[line].rstrip("\r\n")
    start = min(max(start, 0), len(text))
    end = len(text) if end is None else min(max(end, start), len(text))
    return types.Range(types.Position(line, start), types.Position(line, end))


def to_client_range(codec: PositionCodec, lines: Sequence[str], rng: types.Range) -> types.Range:
    """`rng` in Python characters → the client's code units (UTF-16 unless negotiated)."""
    return codec.range_to_client_units(lines, rng)


def from_client_position(
    codec: PositionCodec, lines: Sequence[str], position: types.Position
) -> types.Position:
    server = codec.position_from_client_units(lines, position)
    return types.Position(server.line, server.character)


class OpenDocuments:
    """The kernel sources open in the editor (as the client names them) and, per file, the
    hash of the text its last job read, to tell a real external change from our own echo."""

    def __init__(self) -> None:
        self._uris: dict[Path, str] = {}
        self._read_hashes: dict[Path, str] = {}

    def open(self, path: Path, uri: str) -> None:
        self._uris[path] = uri

    def close(self, path: Path) -> bool:
        """Whether `path` was open."""
        return self._uris.pop(path, None) is not None

    def paths(self) -> list[Path]:
        return list(self._uris)

    def is_open(self, path: Path) -> bool:
        return path in self._uris

    def uri_of(self, path: Path) -> str | None:
        """The client's URI of the open `path`; None when it isn't open."""
        return self._uris.get(path)

    def uri_for(self, path: Path) -> str:
        """The client's URI when `path` is open, else its `file:` URI."""
        return self._uris.get(path) or path_to_uri(path)

    def record_read(self, path: Path, text: str) -> None:
        self._read_hashes[path] = text_hash(text)

    def changed_since_read(self, path: Path, text: str) -> bool:
        return self._read_hashes.get(path) != text_hash(text)
