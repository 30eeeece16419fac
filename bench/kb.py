"""Knowledge-base latency with a large replay buffer: rank(), record(), entry() and open().

    python -m bench.kb [--attempts 100000] [--calls 2000] [--out bench/results]

Fills a fresh KB with attempts spread as an active team's would be, times each call many times
and writes percentiles to bench/results/kb-<host>.json. Target: rank() p99 < 5 ms."""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import socket
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import msgspec

from kernelblaster.kb import rows
from kernelblaster.kb.records import Attempt, Note
from kernelblaster.kb.store import KnowledgeBase

ARCHS = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100"]
OUTCOMES = ["success"] * 5 + ["regression"] * 2 + ["compile_error", "wrong_result", "rejected"]
FINDINGS = ["uncoalesced_global_access", "stall_long_scoreboard", "tail_effect", "stall_barrier"]


class Finding(msgspec.Struct):
    id: str
    estimated_speedup: float | None


def synthetic_attempt(rng: random.Random, states: list[str], techniques: list[str]) -> Attempt:
    outcome = rng.choice(OUTCOMES)
    verified = outcome in ("success", "regression")
    measured = None
    if verified:
        measured = math.exp(rng.gauss(0.3 if outcome == "success" else -0.15, 0.2))
    return Attempt(
        id=uuid.UUID(int=rng.getrandbits(128)).hex,
        time=1.7e9 + rng.random() * 3e7,
        arch=rng.choice(ARCHS),
        kernel=f"kernel_{rng.randrange(500)}",
        source_hash=f"{rng.getrandbits(64):016x}",
        candidate_hash=f"{rng.getrandbits(64):016x}",
        before_state=rng.choice(states),
        after_state=rng.choice(states) if verified else None,
        technique=rng.choice(techniques),
        predicted_speedup=1.0 + rng.random(),
        measured_speedup=measured,
        outcome=outcome,
        prompt_tokens=rng.randrange(500, 6000),
        completion_tokens=rng.randrange(200, 3000),
        error_kind=None if verified else outcome,
    )


def fill(kb: KnowledgeBase, count: int, rng: random.Random) -> float:
    states = [s.id for s in kb.states()]
    techniques = [t.id for t in kb.techniques()]
    start = time.perf_counter()
    with kb.write_transaction() as conn:
        for _ in range(count):
            rows.record_in(conn, synthetic_attempt(rng, states, techniques))
        for i in range(count // 20):  # notes: a twentieth as many as attempts
            note = f"note {i}: " + "observed behaviour " * rng.randrange(2, 12)
            rows.insert_note(
                conn,
                Note(
                    id=uuid.UUID(int=rng.getrandbits(128)).hex,
                    arch=rng.choice(ARCHS),
                    state=rng.choice(states),
                    technique=rng.choice(techniques),
                    time=1.7e9 + rng.random() * 3e7,
                    text=note,
                ),
            )
    return time.perf_counter() - start


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "n": len(ms),
        "p50_ms": round(cuts[49], 4),
        "p90_ms": round(cuts[89], 4),
        "p99_ms": round(cuts[98], 4),
        "max_ms": round(ms[-1], 4),
        "mean_ms": round(statistics.fmean(ms), 4),
    }


def timed(call, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall back to what platform knows
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    rng = random.Random(1234)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kb.sqlite3"
        with KnowledgeBase.open(path) as kb:
            fill_s = fill(kb, args.attempts, rng)
            states = [s.id for s in kb.states()]
            techniques = [t.id for t in kb.techniques()]

            def rank_call():
                findings = [
                    Finding(f, rng.choice([None, 12.0, 40.0]))
                    for f in rng.sample(FINDINGS, rng.randrange(0, 3))
                ]
                kb.rank(rng.choice(ARCHS), rng.choice(states), findings)

            timed(rank_call, 50)  # warm the page cache
            rank = timed(rank_call, args.calls)
            record = timed(
                lambda: kb.record(synthetic_attempt(rng, states, techniques)), min(args.calls, 1000)
            )
            entry = timed(
                lambda: kb.entry(rng.choice(ARCHS), rng.choice(states), rng.choice(techniques)),
                args.calls,
            )
            ranked_len = len(kb.rank("sm_90", "memory.dram"))
            total = kb.summary().attempts
        size_mb = path.stat().st_size / 2**20
        open_s = timed(lambda: KnowledgeBase.open(path).close(), 20)

    result = {
        "host": socket.gethostname(),
        "device": f"cpu: {cpu_model()} x{os.cpu_count()}",
        # other processes share the machine; the load shows how much the tail is theirs
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "attempts_in_kb": total,
        "kb_file_mb": round(size_mb, 1),
        "fill_seconds": round(fill_s, 2),
        "techniques_ranked_for_memory_dram": ranked_len,
        "rank": percentiles(rank),
        "record": percentiles(record),
        "entry": percentiles(entry),
        "open": percentiles(open_s),
        "target_rank_p99_ms": 5.0,
        "target_met": percentiles(rank)["p99_ms"] < 5.0,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in result["host"]) or "cpu"
    out = args.out / f"kb-{name}.json"
    out.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
