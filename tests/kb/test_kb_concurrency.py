"""Several processes writing at once lose nothing; a process killed mid-write corrupts nothing."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from collections import Counter

from kb_helpers import make_attempt, refolded_counts, stored_counts

from kernelblaster.kb import rows
from kernelblaster.kb.store import KnowledgeBase

WRITERS = 4
PER_WRITER = 500
TECHNIQUES = ["coalesce_global_access", "vectorized_loads", "kernel_fusion"]
OUTCOMES = ["success", "regression", "compile_error", "wrong_result", "success"]


def plan(writer: int, count: int) -> list[tuple[str, str, float | None]]:
    """The attempts writer `writer` records: (technique, outcome, measured speedup)."""
    steps = []
    for i in range(count):
        outcome = OUTCOMES[(i + writer) % len(OUTCOMES)]
        measured = {"success": 1.0 + (i % 9) / 10, "regression": 0.9}.get(outcome)
        steps.append((TECHNIQUES[i % len(TECHNIQUES)], outcome, measured))
    return steps


def write_attempts(path: str, writer: int, count: int, start) -> None:
    start.wait()
    with KnowledgeBase.open(path) as kb:
        for technique, outcome, measured in plan(writer, count):
            kb.record(
                make_attempt(
                    arch=f"sm_{80 + writer % 2 * 10}",
                    technique=technique,
                    outcome=outcome,
                    measured_speedup=measured,
                )
            )


def test_concurrent_writers_lose_nothing(kb_path):
    KnowledgeBase.open(kb_path).close()  # created once; the writers race on the records
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    workers = [
        ctx.Process(target=write_attempts, args=(str(kb_path), w, PER_WRITER, start))
        for w in range(WRITERS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0] * WRITERS

    expected: Counter = Counter()
    for w in range(WRITERS):
        for technique, outcome, _ in plan(w, PER_WRITER):
            expected[f"sm_{80 + w % 2 * 10}", technique, outcome] += 1
    with KnowledgeBase.open(kb_path) as kb:
        attempts = kb.attempts()
        assert len(attempts) == WRITERS * PER_WRITER
        assert len({a.id for a in attempts}) == WRITERS * PER_WRITER
        assert Counter((a.arch, a.technique, a.outcome) for a in attempts) == expected
        for arch in ("sm_80", "sm_90"):
            for technique in TECHNIQUES:
                entry = kb.entry(arch, "memory.dram", technique)
                assert entry.successes == expected[arch, technique, "success"]
                assert entry.regressions == expected[arch, technique, "regression"]
                assert entry.failures == (
                    expected[arch, technique, "compile_error"]
                    + expected[arch, technique, "wrong_result"]
                )
        assert stored_counts(kb) == refolded_counts(kb)
        assert kb.summary().attempts == WRITERS * PER_WRITER


def hold_open_transaction(path: str, committed: int, ready) -> None:
    """Commit `committed` attempts, then die (by SIGKILL from the parent) in the middle of a
    write transaction that has already inserted hundreds more."""
    kb = KnowledgeBase.open(path)
    for _ in range(committed):
        kb.record(make_attempt())
    with kb.write_transaction() as conn:
        for _ in range(500):
            rows.record_in(conn, make_attempt(technique="vectorized_loads"))
        ready.set()
        time.sleep(60)


def record_forever(path: str, ack_path: str) -> None:
    """Record attempts as fast as possible, appending each id to `ack_path` once committed
    (one unbuffered write per id, so a kill can't leave an acknowledgement half-written)."""
    kb = KnowledgeBase.open(path)
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    while True:
        attempt = make_attempt()
        kb.record(attempt)
        os.write(ack, f"{attempt.id}\n".encode())


def _integrity(path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_kill_mid_transaction_keeps_committed_data(kb_path):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=hold_open_transaction, args=(str(kb_path), 40, ready))
    child.start()
    assert ready.wait(timeout=60), "the writer never reached its open transaction"
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL

    with KnowledgeBase.open(kb_path) as kb:  # the next process recovers the WAL
        assert len(kb.attempts()) == 40
        assert kb.attempts(technique="vectorized_loads") == []
        assert kb.entry("sm_90", "memory.dram", "vectorized_loads") is None
        assert kb.entry("sm_90", "memory.dram", "coalesce_global_access").attempts == 40
        kb.record(make_attempt())  # and keeps working
    assert _integrity(kb_path) == "ok"


def test_kill_at_random_points_loses_no_acknowledged_attempt(kb_path):
    ctx = multiprocessing.get_context("spawn")
    ack_path = kb_path.with_name("acknowledged.txt")
    KnowledgeBase.open(kb_path).close()
    for kills, delay in enumerate((0.05, 0.13, 0.21), start=1):
        child = ctx.Process(target=record_forever, args=(str(kb_path), str(ack_path)))
        child.start()
        deadline = time.monotonic() + 60
        while len(_lines(ack_path)) < kills * 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until this writer is committing
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
    acked = _lines(ack_path)
    assert _integrity(kb_path) == "ok"
    with KnowledgeBase.open(kb_path) as kb:
        stored = {a.id for a in kb.attempts()}
        assert len(acked) > 15
        assert acked - stored == set()  # every acknowledged attempt is there
        assert len(stored - acked) <= 3  # at most one committed per kill before its ack
        assert stored_counts(kb) == refolded_counts(kb)  # statistics match the attempts


def _lines(path) -> set[str]:
    return set(path.read_text().split()) if path.exists() else set()
