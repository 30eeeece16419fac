"""Standalone programs (a `.cu` with `main`): run the built executable, compare what it prints
with a recorded golden output (numbers within tolerance, everything else exactly), and time the
whole run."""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from pathlib import Path

from kernelblaster.harness.protocol.processes import run_tool
from kernelblaster.harness.protocol.records import HarnessError, Mismatch, Timing, VerifyResult
from kernelblaster.harness.target.compare import finite_or_none

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.IGNORECASE)


def compare_output(
    actual: str, golden: str, *, atol: float = 1e-5, rtol: float = 1e-4
) -> VerifyResult:
    """Token-by-token: numbers within atol + rtol·|golden|, other text identical."""
    a_tokens, g_tokens = actual.split(), golden.split()
    mismatches: list[Mismatch] = []
    message = f"output matches the golden file ({len(g_tokens)} tokens)"
    if len(a_tokens) != len(g_tokens):
        message = f"printed {len(a_tokens)} tokens, the golden output has {len(g_tokens)}"
    for index, (a, g) in enumerate(zip(a_tokens, g_tokens, strict=False)):
        if _NUMBER.fullmatch(a) and _NUMBER.fullmatch(g):
            av, gv = float(a), float(g)
            if abs(av - gv) <= atol + rtol * abs(gv) or (av != av and gv != gv):
                continue
            mismatches.append(
                Mismatch(
                    output=0,
                    trial=0,
                    seed=0,
                    max_abs_error=abs(av - gv),
                    max_rel_error=abs(av - gv) / max(abs(gv), 1e-12),
                    first_bad_index=[index],
                    expected=finite_or_none(gv),
                    actual=finite_or_none(av),
                    bad_elements=1,
                    total_elements=len(g_tokens),
                    nonfinite=int(av != av),
                )
            )
        elif a != g:
            message = f"token {index}: printed {a!r}, golden output has {g!r}"
            break
    if mismatches and message.startswith("output matches"):
        first = mismatches[0]
        message = (
            f"{len(mismatches)} number(s) differ from the golden output; first: token "
            f"{first.first_bad_index[0]} expected {first.expected} got {first.actual}"
        )
    ok = not mismatches and message.startswith("output matches")
    return VerifyResult(
        ok=ok, trials=1, atol=atol, rtol=rtol, mismatches=mismatches, message=message
    )


def run_program(
    executable: Path, args: list[str], *, timeout_s: float, cwd: Path
) -> tuple[str, float] | HarnessError:
    began = time.perf_counter()
    try:
        done = run_tool([str(executable), *args], timeout=timeout_s, cwd=cwd, merge_stderr=False)
    except subprocess.TimeoutExpired:
        return HarnessError(
            kind="timeout",
            message=f"{executable.name} did not finish within {timeout_s:.0f} s and was killed.",
            fix="Look for a kernel or host loop that never ends; raise runTimeoutS if it is slow.",
        )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        fault = "illegal memory access" in done.stderr + done.stdout
        return HarnessError(
            kind="illegal_memory_access" if fault else "crash",
            message=f"{executable.name} exited with status {done.returncode}.",
            fix="Run it under compute-sanitizer (`kernelblaster check --sanitize`).",
            log=(done.stdout + done.stderr)[-2000:],
        )
    return done.stdout, seconds


def time_program(
    executable: Path, args: list[str], *, timeout_s: float, cwd: Path
) -> Timing | None:
    """Whole-program wall time (median of 3): a standalone program times itself otherwise."""
    runs = []
    for _ in range(3):
        outcome = run_program(executable, args, timeout_s=timeout_s, cwd=cwd)
        if isinstance(outcome, HarnessError):
            break
        runs.append(outcome[1] * 1000.0)
    if not runs:
        return None
    runs.sort()
    return Timing(
        median_ms=statistics.median(runs),
        min_ms=runs[0],
        max_ms=runs[-1],
        p20_ms=runs[0],
        p80_ms=runs[-1],
        repetitions=len(runs),
    )
