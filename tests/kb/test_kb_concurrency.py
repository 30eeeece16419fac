"""Several processes writing at once lose nothing; a process killed mid-write corrupts nothing.
Each test runs on both back ends (an SQLite file, a PostgreSQL server)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import Counter

from kernelblaster.kb import rows
from kernelblaster.kb.store import KnowledgeBase
from tests.kb.kb_helpers import integrity, make_attempt, refolded_counts, stored_counts

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


def _planned_attempt(writer: int, step: tuple[str, str, float | None]):
    technique, outcome, measured = step
    return make_attempt(
        arch=f"sm_{80 + writer % 2 * 10}",
        technique=technique,
        outcome=outcome,
        measured_speedup=measured,
    )


def write_attempts(location, writer: int, count: int, ack_path: str, start) -> None:
    """Record writer `writer`'s plan, appending each id to `ack_path` once committed (one
    unbuffered write per id, so a kill can't leave an acknowledgement half-written)."""
    start.wait()
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with KnowledgeBase.open(location) as kb:
        for step in plan(writer, count):
            attempt = _planned_attempt(writer, step)
            kb.record(attempt)
            os.write(ack, f"{attempt.id}\n".encode())


def die_mid_transaction(location, writer: int, committed: int, ack_path: str, start, ready):
    """Commit the first `committed` attempts of the plan, then record the rest of it inside one
    open write transaction and wait there to be killed (SIGKILL, by the parent)."""
    start.wait()
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    kb = KnowledgeBase.open(location)
    steps = plan(writer, PER_WRITER)
    for step in steps[:committed]:
        attempt = _planned_attempt(writer, step)
        kb.record(attempt)
        os.write(ack, f"{attempt.id}\n".encode())
    with kb.write_transaction() as conn:
        for step in steps[committed:]:
            rows.record_in(conn, _planned_attempt(writer, step))
        ready.set()
        time.sleep(120)


def test_writers_and_one_killed_mid_transaction_count_exactly_what_was_committed(
    kb_location, tmp_path
):
    """N writer processes x M attempts at once, one more killed inside a write transaction:
    afterwards the attempts are exactly those acknowledged as committed, and every count and
    statistic equals what those attempts add up to."""
    KnowledgeBase.open(kb_location).close()  # created once; the writers race on the records
    ctx = multiprocessing.get_context("spawn")
    start, ready = ctx.Barrier(WRITERS + 1), ctx.Event()
    acks = [tmp_path / f"acknowledged-{w}.txt" for w in range(WRITERS + 1)]
    victim_commits = PER_WRITER // 5
    workers = [
        ctx.Process(target=write_attempts, args=(kb_location, w, PER_WRITER, str(acks[w]), start))
        for w in range(WRITERS)
    ]
    victim = ctx.Process(
        target=die_mid_transaction,
        args=(kb_location, WRITERS, victim_commits, str(acks[WRITERS]), start, ready),
    )
    for process in (*workers, victim):
        process.start()
    assert ready.wait(timeout=120), "the victim never reached its open transaction"
    os.kill(victim.pid, signal.SIGKILL)  # the others are still writing, or waiting for its lock
    victim.join(timeout=30)
    for worker in workers:
        worker.join(timeout=300)
    assert victim.exitcode == -signal.SIGKILL
    assert [w.exitcode for w in workers] == [0] * WRITERS

    committed = {w: _lines(acks[w]) for w in range(WRITERS + 1)}
    assert [len(committed[w]) for w in range(WRITERS)] == [PER_WRITER] * WRITERS
    assert len(committed[WRITERS]) == victim_commits
    expected: Counter = Counter()
    for w in range(WRITERS + 1):
        for technique, outcome, _ in plan(w, len(committed[w])):
            expected[f"sm_{80 + w % 2 * 10}", technique, outcome] += 1
    with KnowledgeBase.open(kb_location) as kb:
        attempts = kb.attempts()
        assert {a.id for a in attempts} == set().union(*committed.values())
        assert len(attempts) == WRITERS * PER_WRITER + victim_commits
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
        assert stored_counts(kb) == refolded_counts(kb)  # the means too, not only the counts
        assert kb.summary().attempts == len(attempts)
        assert kb.record(make_attempt())  # the victim's lock is gone: writing goes on
    assert integrity(kb_location) == "ok"


def hold_open_transaction(location, committed: int, ready) -> None:
    """Commit `committed` attempts, then die (by SIGKILL from the parent) in the middle of a
    write transaction that has already inserted hundreds more."""
    kb = KnowledgeBase.open(location)
    for _ in range(committed):
        kb.record(make_attempt())
    with kb.write_transaction() as conn:
        for _ in range(500):
            rows.record_in(conn, make_attempt(technique="vectorized_loads"))
        ready.set()
        time.sleep(60)


def record_forever(location, ack_path: str) -> None:
    """Record attempts as fast as possible, appending each id to `ack_path` once committed."""
    kb = KnowledgeBase.open(location)
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    while True:
        attempt = make_attempt()
        kb.record(attempt)
        os.write(ack, f"{attempt.id}\n".encode())


def test_kill_mid_transaction_keeps_committed_data(kb_location):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=hold_open_transaction, args=(kb_location, 40, ready))
    child.start()
    assert ready.wait(timeout=60), "the writer never reached its open transaction"
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL

    with KnowledgeBase.open(kb_location) as kb:  # the next process recovers (SQLite's WAL)
        assert len(kb.attempts()) == 40
        assert kb.attempts(technique="vectorized_loads") == []
        assert kb.entry("sm_90", "memory.dram", "vectorized_loads") is None
        assert kb.entry("sm_90", "memory.dram", "coalesce_global_access").attempts == 40
        kb.record(make_attempt())  # and keeps working
    assert integrity(kb_location) == "ok"


def test_kill_at_random_points_loses_no_acknowledged_attempt(kb_location, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ack_path = tmp_path / "acknowledged.txt"
    KnowledgeBase.open(kb_location).close()
    for kills, delay in enumerate((0.05, 0.13, 0.21), start=1):
        child = ctx.Process(target=record_forever, args=(kb_location, str(ack_path)))
        child.start()
        deadline = time.monotonic() + 60
        while len(_lines(ack_path)) < kills * 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until this writer is committing
        assert len(_lines(ack_path)) >= kills * 5, "the writer acknowledged nothing new in 60 s"
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
    acked = _lines(ack_path)
    assert integrity(kb_location) == "ok"
    with KnowledgeBase.open(kb_location) as kb:
        stored = {a.id for a in kb.attempts()}
        # each kill came after its writer's acknowledgements (under load, maybe no later one)
        assert len(acked) >= 15
        assert acked - stored == set()  # every acknowledged attempt is there
        assert len(stored - acked) <= 3  # at most one committed per kill before its ack
        assert stored_counts(kb) == refolded_counts(kb)  # statistics match the attempts


def _lines(path) -> set[str]:
    return set(path.read_text().split()) if path.exists() else set()
