"""The numbers a KernelBench run is judged by: speedup over the faster of eager and torch.compile
(as the paper), valid rate (fast_0), geomean and median speedup over verified problems, and
fast_p over all problems. Problems that could not be checked count as not valid: skipping them
would flatter the run."""

from __future__ import annotations

import math
import statistics
from collections import Counter

import msgspec

from kernelblaster.agents.kernelbench.records import ProblemResult, Summary

FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


class Anchor(msgspec.Struct, kw_only=True, frozen=True):
    geomean_speedup: float
    valid_rate: float


# The KernelBlaster paper's results on an H100 against the best of eager and torch.compile.
PAPER_ANCHORS = {
    "level1": Anchor(geomean_speedup=1.497, valid_rate=0.86),
    "level2": Anchor(geomean_speedup=2.592, valid_rate=0.81),
}
PAPER_ANCHOR_SOURCE = "KernelBlaster paper, H100, speedup over the best of eager and torch.compile"


def geomean(values: list[float]) -> float | None:
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def verified_speedups(results: list[ProblemResult]) -> list[float]:
    return [r.speedup for r in results if r.status == "verified" and r.speedup]


def fast_p(results: list[ProblemResult], p: float) -> float:
    """The share of all problems that verified and beat the baseline by more than `p`."""
    if not results:
        return 0.0
    return sum(1 for s in verified_speedups(results) if s > p) / len(results)


def p_key(p: float) -> str:
    return f"{p:g}"


def summarize(results: list[ProblemResult]) -> Summary:
    speedups = verified_speedups(results)
    verified = sum(1 for r in results if r.status == "verified")
    return Summary(
        problems=len(results),
        verified=verified,
        valid_rate=verified / len(results) if results else 0.0,
        geomean_speedup=geomean(speedups),
        median_speedup=statistics.median(speedups) if speedups else None,
        fast_p={p_key(p): fast_p(results, p) for p in FAST_P_THRESHOLDS},
        statuses=dict(Counter(r.status for r in results)),
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        wall_s=round(sum(r.wall_s for r in results), 1),
    )
