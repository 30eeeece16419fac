"""Performance-state records: what the classifier says about a kernel, and why."""

from __future__ import annotations

from typing import Literal

import msgspec

Bottleneck = Literal["memory", "compute", "latency", "occupancy", "launch"]

# Bumped whenever classification rules change, so cached states and KB rows can tell
# which classifier produced them.
STATE_VERSION = 3


class Finding(msgspec.Struct, kw_only=True):
    id: str  # e.g. "uncoalesced_global_access"
    evidence: dict[str, float] = {}  # the metric values that support it
    estimated_speedup: float | None = None  # percent, from ncu's rule when it gives one
    lines: list[int] = []  # source lines ncu blames, in the kernel's own file
    message: str = ""


class Headroom(msgspec.Struct, kw_only=True):
    # sm_throughput: the SM's speed of light, the roof of a compute-bound kernel whose pipes
    # don't show which one binds it
    roof: Literal["dram_bandwidth", "fp32", "fp16_tensor", "fp64", "sm_throughput", "none"]
    achieved_fraction: float  # achieved over the roof's peak, 0..1


class PerfState(msgspec.Struct, kw_only=True):
    kernel: str
    arch: str
    bottleneck: Bottleneck
    state: str  # e.g. "memory.dram", "memory.l1", "latency.long_scoreboard"
    summary: str  # one line a person understands
    findings: list[Finding] = []
    headroom: Headroom | None = None
    near_limit: bool = False
    metrics: dict[str, float] = {}  # the key metrics shown in hover
    version: int = STATE_VERSION


# --- optimize worker protocol --------------------------------------------------------------
# `python -m kernelblaster.agents.optimize_worker` reads one OptimizeRequest as JSON on stdin and
# writes JSON lines: any number of OptimizeProgress, then exactly one OptimizeResponse. The
# caller may kill it at any time; the KB keeps every attempt recorded up to then.


class OptimizeRequest(msgspec.Struct, kw_only=True):
    source: str  # absolute path of the .cu file
    source_text: str  # the document's text the optimization starts from
    kernel: str
    technique: str | None = None  # force this technique for the first step; KB-sampled if None
    rollouts: int = 4
    depth: int = 3
    top_k: int = 3
    seed: int | None = None
    settings: dict = {}  # kernelblaster.settings.Settings as builtins


class OptimizeProgress(msgspec.Struct, kw_only=True, tag="progress"):
    step: int  # 1-based, out of `total`
    total: int
    message: str  # e.g. "rollout 2 step 1: shared_memory_tiling predicted 2.1x, measured 1.7x"
    best_speedup: float | None = None


class OptimizeResponse(msgspec.Struct, kw_only=True, tag="result"):
    kernel: str
    improved: bool  # a verified candidate faster than the original exists
    best_source: str | None = None  # full text of the best verified candidate
    speedup: float | None = None  # vs the original kernel
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    techniques: list[str] = []  # applied along the best trajectory
    attempts: int = 0
    message: str = ""  # one line for the user
    error: str | None = None  # why the run could not complete (LLM unreachable, no GPU, ...)


OptimizeMessage = OptimizeProgress | OptimizeResponse
