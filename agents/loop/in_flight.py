"""The techniques rollouts running at once are trying right now, per starting kernel. A step in
flight has no record yet, so greedy rollouts choosing together would all take one technique; one
another rollout is trying on this kernel counts as taken while another is left. One registry per
process."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

Choice = TypeVar("Choice")


class InFlight:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trying: Counter[tuple[str, str]] = Counter()  # (source hash, technique)

    def choose(
        self,
        source_hash: str,
        pick: Callable[..., Choice | None],
        technique_of: Callable[[Choice], str],
    ) -> Choice | None:
        """`pick(busy=...)` (the techniques others are trying on `source_hash`) and the picked
        technique marked as tried here, both under one lock: two rollouts choosing at once
        see each other's choice."""
        with self._lock:
            busy = {t for (h, t), n in self._trying.items() if h == source_hash and n > 0}
            choice = pick(busy=busy)
            if choice is not None:
                self._trying[(source_hash, technique_of(choice))] += 1
            return choice

    def done(self, source_hash: str, technique: str) -> None:
        """The step `choose` marked is over and recorded: its record ranks it from now on."""
        with self._lock:
            self._trying[(source_hash, technique)] -= 1
