"""The best verified candidate kept for each kernel of each source: found on disk when a file
is opened, replaced when an optimization verifies a faster one. Read by the code actions
("Show diff"), `kernelblaster.showDiff` and the knowledge-base view."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.server.results.cache import KeptCandidate


class KeptCandidates:
    def __init__(self) -> None:
        self._by_source: dict[Path, dict[str, KeptCandidate]] = {}

    def replace(self, source: Path, found: dict[str, KeptCandidate]) -> None:
        """What is on disk for `source` now (the file was just opened)."""
        self._by_source[source] = found

    def keep(self, source: Path, candidate: KeptCandidate) -> None:
        self._by_source.setdefault(source, {})[candidate.kernel] = candidate

    def get(self, source: Path, kernel: str) -> KeptCandidate | None:
        return self._by_source.get(source, {}).get(kernel)

    def by_source(self) -> dict[Path, dict[str, KeptCandidate]]:
        """A copy, safe to read from another thread while the server goes on."""
        return {source: dict(kept) for source, kept in self._by_source.items()}
