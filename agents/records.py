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
