"""Opening the knowledge base for a long-running user (the loop, the language server), which must
keep working when the KB asked for can't be had: a team KB while its server is away, a fresh
file beside a corrupt one. Above both kb.store and kb.team, which it chooses between."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.kb.database import KBUnwritableError
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import KnowledgeBase, default_path, personal_path
from kernelblaster.kb.team import TeamKnowledgeBase
from kernelblaster.kb_location import is_postgres_url


def open_or_fallback(location: Path | str | None) -> tuple[KnowledgeBase, str | None]:
    """Open the KB at `location` for a long-running user, with a message when it is not quite what
    was asked (else None). A corrupt or foreign file is left untouched and a fresh KB opened
    beside it; an unwritable one raises KBUnwritableError. A team KB survives an unreachable
    server (kb.team); one that can't be used at all gives way to the personal KB."""
    location = location if location is not None else default_path()
    if is_postgres_url(location):
        try:
            return TeamKnowledgeBase.connect(str(location), personal_path())
        except KBError as exc:
            kb = KnowledgeBase.open(personal_path())
            return kb, f"{exc}. Using your personal knowledge base {kb.path} until then."
    path = Path(location)
    try:
        return KnowledgeBase.open(path), None
    except KBUnwritableError:
        raise
    except KBError as exc:
        fallback = path.with_name(f"{path.stem}.fresh{path.suffix or '.sqlite3'}")
        kb = KnowledgeBase.open(fallback)
        return kb, f"{exc}. Using a fresh knowledge base at {fallback} until that is resolved."
