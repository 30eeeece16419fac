"""The outbox of a team KB: what was learned while its PostgreSQL server could not be reached,
kept in the local SQLite KB (table `outbox`), written in the same transaction that applied it
there, until kb.team sends it. Sending is idempotent (kb.rows.apply_change: attempts and notes
by id, priors by time), so a send interrupted after the server committed and before the outbox
was cleared is simply sent again, and nothing is counted twice."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from kernelblaster.kb.database import Connection
from kernelblaster.kb.records import Attempt, Change, Note, PriorOverride, Proposal, State

_KINDS: dict[str, type[Change]] = {
    "attempt": Attempt,
    "note": Note,
    "prior": PriorOverride,
    "state": State,
    "proposal": Proposal,
}


class Queued(msgspec.Struct, frozen=True):
    kind: str
    id: str
    queued: float
    change: Change


def _key(change: Change) -> tuple[str, str]:
    """Its kind and its key: a later prior for the same entry replaces an earlier one."""
    if isinstance(change, PriorOverride):
        return "prior", f"{change.arch} {change.state} {change.technique}"
    kind = next(name for name, type_ in _KINDS.items() if isinstance(change, type_))
    return kind, change.id


def push(conn: Connection, target: str, changes: Sequence[Change]) -> None:
    now = time.time()
    for change in changes:
        kind, key = _key(change)
        conn.execute(
            "INSERT INTO outbox (target, kind, id, queued, body) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (target, kind, id) DO UPDATE SET queued = excluded.queued, "
            "body = excluded.body",
            (target, kind, key, now, msgspec.json.encode(change).decode()),
        )


def pending(conn: Connection, target: str) -> list[Queued]:
    """What waits for `target`, oldest first."""
    found = conn.execute(
        "SELECT kind, id, queued, body FROM outbox WHERE target = ? ORDER BY queued, kind, id",
        (target,),
    )
    return [
        Queued(kind, key, queued, msgspec.json.decode(body, type=_KINDS[kind]))
        for kind, key, queued, body in found
    ]


def remove(conn: Connection, target: str, sent: Sequence[Queued]) -> None:
    """Drop what was sent, unless it was queued again (with newer content) since it was read."""
    for item in sent:
        conn.execute(
            "DELETE FROM outbox WHERE target = ? AND kind = ? AND id = ? AND queued = ?",
            (target, item.kind, item.id, item.queued),
        )
