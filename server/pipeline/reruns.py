"""Running open sources again when something they depend on changes outside a save: a file
changed on disk (the watcher), a header its includers name, a configuration file, settings
that change results."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from kernelblaster.harness.target.pairing import REFERENCE_SUFFIX
from kernelblaster.server.editor.documents import BINDINGS_SUFFIX, is_header
from kernelblaster.server.editor.watcher import CONFIG_NAMES
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.session import settings_sync

if TYPE_CHECKING:
    from kernelblaster.server.session.language_server import KernelBlasterServer


def includers(ls: KernelBlasterServer, header: Path) -> list[Path]:
    """Open sources (not headers) that include `header` by name."""
    found = []
    for path in ls.documents.paths():
        document = ls.workspace.text_documents.get(ls.documents.uri_for(path))
        if not is_header(path) and document is not None and header.name in document.source:
            found.append(path)
    return found


def external_change(ls: KernelBlasterServer, path: Path) -> None:
    """A file changed outside the editor (runs on the event loop, from the watcher)."""
    if path.name in CONFIG_NAMES:
        ls.background(_reconfigure(ls))
    elif path.suffix in (REFERENCE_SUFFIX, BINDINGS_SUFFIX):  # foo.cu's foo.py or foo.cpp
        for source in ls.documents.paths():
            if source.parent == path.parent and source.stem == path.stem:
                pipeline.schedule(ls, source)
    elif is_header(path):
        for source in includers(ls, path):
            pipeline.schedule(ls, source)
    elif ls.documents.is_open(path):
        ls.background(_rerun_if_changed(ls, path))


async def _rerun_if_changed(ls: KernelBlasterServer, path: Path) -> None:
    # Writers truncate, then write: read once the file has settled, not at the first event.
    await asyncio.sleep(ls.jobs.debounce_s)
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # deleted or being rewritten; the next event or save brings it back
    if ls.documents.changed_since_read(path, text):
        pipeline.schedule(ls, path)


async def _reconfigure(ls: KernelBlasterServer) -> None:
    await settings_sync.refresh(ls)
    rerun_open_sources(ls)


def rerun_open_sources(ls: KernelBlasterServer) -> None:
    """Run every open source again (not the headers: their includers are sources)."""
    for path in ls.documents.paths():
        if not is_header(path):
            pipeline.schedule(ls, path)
