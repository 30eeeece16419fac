"""Helpers shared by the knowledge-base tests (importable by spawned worker processes too)."""

from __future__ import annotations

import itertools
import sqlite3
import uuid

from kernelblaster.kb.records import VERIFIED_OUTCOMES, Attempt

_clock = itertools.count(1)


def make_attempt(**fields) -> Attempt:
    """An attempt with plausible defaults; `time` increases so ordering is deterministic.
    Failed outcomes get no measured speedup unless one is given."""
    values = {
        "id": uuid.uuid4().hex,
        "time": 1_700_000_000.0 + next(_clock),
        "arch": "sm_90",
        "kernel": "softmax_kernel",
        "source_hash": "src0",
        "candidate_hash": "cand0",
        "before_state": "memory.dram",
        "technique": "coalesce_global_access",
        "predicted_speedup": 1.45,
        "outcome": "success",
        "measured_speedup": 1.5,
    }
    values.update(fields)
    if values["outcome"] not in VERIFIED_OUTCOMES and "measured_speedup" not in fields:
        values["measured_speedup"] = None
    return Attempt(**values)


def refolded_counts(kb) -> dict[tuple[str, str, str], tuple]:
    """Per entry, the statistics recomputed from scratch from the recorded attempts."""
    from kernelblaster.kb.stats import EntryCounts, fold

    counts: dict[tuple[str, str, str], EntryCounts] = {}
    for attempt in reversed(kb.attempts()):  # oldest first, as they were recorded
        key = (attempt.arch, attempt.before_state, attempt.technique)
        fold(counts.setdefault(key, EntryCounts()), attempt)
    return {
        key: _summary(
            c.attempts,
            c.successes,
            c.regressions,
            c.failures,
            c.mean_log_speedup if c.n_measured else None,
        )
        for key, c in counts.items()
    }


def stored_counts(kb) -> dict[tuple[str, str, str], tuple]:
    return {
        (e.arch, e.state, e.technique): _summary(
            e.attempts, e.successes, e.regressions, e.failures, e.mean_log_speedup
        )
        for e in kb.entries()
        if e.attempts
    }


def _summary(attempts, successes, regressions, failures, mean_log):
    return (
        attempts,
        successes,
        regressions,
        failures,
        None if mean_log is None else round(mean_log, 9),
    )


def integrity(location) -> str:
    """SQLite's own check of a KB file; a PostgreSQL server looks after its own storage."""
    if isinstance(location, str):
        return "ok"
    conn = sqlite3.connect(location)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
