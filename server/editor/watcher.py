"""Changes made outside the editor (git checkout, generated code) to kernel sources, their
references, bindings and configuration, seen through watchdog and handed to the server's event
loop (`call_soon_threadsafe`). Only folders holding an open kernel or its configuration are
watched, and the server's own `.kernelblaster/` output is ignored."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from kernelblaster.harness.target.pairing import REFERENCE_SUFFIX
from kernelblaster.server.editor.documents import (
    BINDINGS_SUFFIX,
    KERNEL_SUFFIXES,
    in_state_dir,
)
from kernelblaster.settings import CONFIG_FILE

log = logging.getLogger(__name__)

CONFIG_NAMES = frozenset({CONFIG_FILE, "pyproject.toml"})
_WATCHED_SUFFIXES = KERNEL_SUFFIXES | {REFERENCE_SUFFIX, BINDINGS_SUFFIX}


def is_relevant(path: Path) -> bool:
    if in_state_dir(path):
        return False
    return path.suffix in _WATCHED_SUFFIXES or path.name in CONFIG_NAMES


class _Handler(FileSystemEventHandler):
    def __init__(self, loop: asyncio.AbstractEventLoop, on_change: Callable[[Path], None]) -> None:
        self._loop = loop
        self._on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("created", "modified", "moved"):
            return
        # Editors and git replace files by renaming a temporary over them: the destination counts.
        raw = getattr(event, "dest_path", "") or event.src_path
        path = Path(raw.decode() if isinstance(raw, bytes) else raw)
        if is_relevant(path):
            self._loop.call_soon_threadsafe(self._on_change, path)


class SourceWatcher:
    def __init__(self, loop: asyncio.AbstractEventLoop, on_change: Callable[[Path], None]) -> None:
        self._handler = _Handler(loop, on_change)
        self._observer = Observer()
        self._observer.daemon = True
        self._watched: set[Path] = set()
        self._started = False

    def watch(self, directory: Path) -> None:
        if directory in self._watched or not directory.is_dir():
            return
        try:
            self._observer.schedule(self._handler, str(directory), recursive=False)
        except OSError as exc:  # e.g. out of inotify watches: the editor's own events still work
            log.warning("cannot watch %s for external changes: %s", directory, exc)
            return
        self._watched.add(directory)
        if not self._started:
            self._observer.start()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._observer.stop()
            self._observer.join(timeout=2)
