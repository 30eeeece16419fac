"""The server's view of the knowledge base: opening it per the settings, ranking the profiled
kernels of a file, and the Markdown of `kernelblaster.knowledgeBase`.

Every call touches SQLite, which may wait on another writer (an optimize worker, a CLI run), so
the server calls these through `asyncio.to_thread`, never on its event loop."""

from __future__ import annotations

import math
from pathlib import Path

from kernelblaster.agents.records import PerfState
from kernelblaster.kb.records import RankedTechnique
from kernelblaster.kb.store import KnowledgeBase, default_path, open_or_fallback
from kernelblaster.server import formatting


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


def markdown(kb: KnowledgeBase) -> str:
    techniques = {t.id: t for t in kb.techniques()}
    entries = [e for e in kb.entries() if e.attempts > 0]
    summary = kb.summary()
    lines = [
        f"# KernelBlaster knowledge base\n\n`{kb.path}` — {summary.techniques} techniques, "
        f"{summary.states} states, {summary.attempts} recorded attempts.",
    ]
    if not entries:
        lines.append(
            "\nNo optimization attempts recorded yet: predictions come from the catalog's priors "
            'and ncu\'s estimates. Every verified outcome of "Optimize kernel" is added here.'
        )
    current = None
    for entry in sorted(entries, key=lambda e: (e.arch, e.state, -e.predicted_speedup)):
        if (entry.arch, entry.state) != current:
            current = (entry.arch, entry.state)
            lines += ["", f"## `{entry.state}` on {entry.arch}", ""]
        technique = techniques.get(entry.technique)
        title = technique.title if technique else entry.technique
        mean = math.exp(entry.mean_log_speedup) if entry.mean_log_speedup is not None else None
        record = formatting.track_record(
            attempts=entry.attempts,
            successes=entry.successes,
            regressions=entry.regressions,
            failures=entry.failures,
            mean_speedup=mean,
        )
        lines.append(
            f"- **{title}** — predicted {formatting.factor(entry.predicted_speedup)} "
            f"(confidence {entry.confidence:.0%}); {record}"
        )
        lines += [f"  - {note}" for note in entry.notes[-2:]]
    lines += ["", "## Techniques", ""]
    lines += [
        f"- **{t.title}** (`{t.id}`, {t.category}): {t.description}" for t in techniques.values()
    ]
    return "\n".join(lines)
