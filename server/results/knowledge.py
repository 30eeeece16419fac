"""The server's knowledge base (`KnowledgeFeature`): opening it per the settings and ranking
the profiled kernels of each file (the view's data: views/knowledge.py).

Every call touches SQLite, which may wait on another writer (an optimize worker, a CLI run), so
`KnowledgeFeature` calls them through `asyncio.to_thread`, never on the server's event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.kb.fallback import open_or_fallback
from kernelblaster.kb.records import RankedTechnique
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import KnowledgeBase, default_path


def resolve_path(kb_path_setting: str | None) -> Path | str:
    """The KB file, or a team KB's URL."""
    return default_path(kb_path_setting)


def open_kb(path: Path | str) -> tuple[KnowledgeBase, str | None]:
    """The KB at `path`; a corrupt one is left alone and a fresh one opened beside it, with a
    message for the user."""
    return open_or_fallback(path)


def rank_states(
    kb: KnowledgeBase, states: dict[str, PerfState]
) -> dict[str, list[RankedTechnique]]:
    return {
        name: kb.rank(state.arch, state.state, state.findings) for name, state in states.items()
    }


class KnowledgeFeature:
    """The server's knowledge base: the KB the settings name, kept open, and its ranked
    techniques for each profiled kernel of each open file, computed when a result lands or the
    KB changes, so hover and code actions read them without touching SQLite."""

    def __init__(self) -> None:
        self._kb: KnowledgeBase | None = None
        self._location: Path | str | None = None  # a file, or a team KB URL
        self._ranked: dict[Path, dict[str, list[RankedTechnique]]] = {}

    @property
    def is_open(self) -> bool:
        return self._kb is not None

    async def use(self, location: Path | str) -> str | None:
        """Switch to the KB at `location` (kept when it is the open one already); a message for
        the user when it could not be opened (the previous one stays) or was replaced."""
        if self._kb is not None and self._location == location:
            return None
        try:
            kb, message = await asyncio.to_thread(open_kb, location)
        except (OSError, KBError) as exc:
            return f"knowledge base {location} can't be opened ({exc}); set kernelblaster.kbPath"
        self.close()
        self._kb, self._location = kb, location
        return message

    def close(self) -> None:
        if self._kb is not None:
            self._kb.close()
            self._kb = None

    async def refresh(self, path: Path, states: dict[str, PerfState]) -> None:
        """Rank the kernels of `path` again (a new result, or the KB learned something)."""
        if self._kb is None or not states:
            self.forget(path)
            return
        self._ranked[path] = await asyncio.to_thread(rank_states, self._kb, states)

    def for_kernel(self, path: Path, kernel: str) -> list[RankedTechnique]:
        return self._ranked.get(path, {}).get(kernel, [])

    def forget(self, path: Path) -> None:
        self._ranked.pop(path, None)

    @property
    def kb(self) -> KnowledgeBase | None:
        """The open KB (None: none could be opened), for a caller that reads it off the event
        loop (the knowledge-base view)."""
        return self._kb
