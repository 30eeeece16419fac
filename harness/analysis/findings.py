"""Findings: the specific, fixable characteristics of a profiled kernel, with their evidence. Each
detector mirrors the ncu rule of its topic, so the verdict doesn't depend on which rules a pass
ran; where the rule fired, its estimated speedup is attached. Missing metrics report nothing;
lines come only from ncu's markers in the kernel's own file."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import msgspec

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.protocol.records import (
    Finding,
    KernelProfile,
    PerfState,
    RuleResult,
    SourceMarker,
)

# Thresholds, each from ncu's rule on the same topic unless said otherwise.
FULL_SECTOR_BYTES = 32.0
UNCOALESCED_BYTES = 28.0  # ours: more than 1/8 of every fetched sector unused
BANK_CONFLICT_FRACTION = 0.2  # ours: a fifth of shared-memory wavefronts are replays
TAIL_MIN_FRACTION = 0.2  # a partial last wave that may take >= 20% of the runtime
ACHIEVED_OCCUPANCY_RATIO = 0.8  # achieved below 80% of theoretical
FULL_OCCUPANCY_PCT = 99.5
STALL_SHARE = 0.3  # a stall reason taking > 30% of the cycles between issues ...
STALL_MAX_ISSUE = 0.8  # ... while schedulers issue on fewer than 80% of cycles
DIVERGENT_THREADS = 28.0  # ours: more than 1 in 8 lanes idle per executed instruction
LOW_ISSUE = 0.6  # schedulers issue on fewer than 60% of cycles
PIPE_SATURATED_PCT = 80.0  # ours: a unit this busy is the limit; more warps can't raise it
CHAIN_MIN_SHARE = 0.1  # ours: kernels besides the dominant one taking >= 10% of the GPU time

_ACTIONABLE = ("optimization", "warning")
_TOOLKIT_HEADER = re.compile(r"(^|/)(cuda[^/]*|nvidia[^/]*)/(.*/)?include/")
_STALL_TYPE = re.compile(r"of type (\w+)")


def find(kernel: KernelProfile, *, device: str = "") -> list[Finding]:
    """All findings for `kernel`, the largest estimated speedup first."""
    own_file = kernel_source_file(kernel.markers)
    found: list[Finding] = []
    for detect in _DETECTORS:
        found.extend(detect(kernel, own_file, device))
    return find_order(found)


def with_kernel_chain(state: PerfState, time_shares: Sequence[float]) -> PerfState:
    """`state` (of the kernel taking most of a launcher's GPU time) with a `kernel_chain` finding
    when its other kernels take >= CHAIN_MIN_SHARE of the time together (`time_shares`). Fused,
    the intermediates stay on chip, so fusing saves at most the others' share: the finding's
    estimate."""
    if len(time_shares) < 2 or sum(time_shares) <= 0:
        return state
    others = 1.0 - max(time_shares) / sum(time_shares)
    if others < CHAIN_MIN_SHARE:
        return state
    chain = Finding(
        id="kernel_chain",
        evidence={"kernels": float(len(time_shares)), "other_kernels_share": round(others, 4)},
        estimated_speedup=100.0 * others,
        message=f"{len(time_shares)} kernels launched: the others take {others:.0%} of GPU time",
    )
    findings = [f for f in state.findings if f.id != chain.id] + [chain]
    return msgspec.structs.replace(state, findings=find_order(findings))


def find_order(findings: list[Finding]) -> list[Finding]:
    """Findings the way `find` lists them: the largest estimated speedup first."""
    return sorted(findings, key=lambda f: (-(f.estimated_speedup or 0.0), _order_key(f.id), f.id))


def kernel_source_file(markers: Iterable[SourceMarker]) -> str | None:
    """The file most of the kernel's markers point into, leaving out CUDA's own headers."""
    files = Counter(mk.file for mk in markers if not _TOOLKIT_HEADER.search(mk.file))
    if not files:
        return None
    return min(files, key=lambda file: (-files[file], file))


def _metric(kernel: KernelProfile, name: str) -> float | None:
    return kernel.metrics.get(name)


def pipe_utilizations(kernel: KernelProfile) -> dict[str, float]:
    """Each pipe's utilization in percent of its peak, for the pipes the profile measured;
    the tensor pipe's is the largest of its metrics (Hopper's wgmma has its own)."""
    found = {pipe: value for pipe, name in m.PIPES.items() if (value := _metric(kernel, name))}
    tensor = [value for name in m.TENSOR_PIPES if (value := _metric(kernel, name))]
    if tensor:
        found["tensor"] = max(tensor)
    return found


def unit_utilizations(kernel: KernelProfile) -> dict[str, float]:
    """The SM, the memory system, the issue slots and each pipe, in percent of its peak, for
    those the profile measured."""
    issue = _metric(kernel, m.ISSUE_ACTIVE)
    units = {
        "SM": _metric(kernel, m.SM_PCT),
        "memory": _metric(kernel, m.MEMORY_PCT),
        "issue slots": issue * 100.0 if issue is not None else None,
        **{f"{pipe} pipe": value for pipe, value in pipe_utilizations(kernel).items()},
    }
    return {unit: value for unit, value in units.items() if value is not None}


def math_pipe_saturated(kernel: KernelProfile) -> bool:
    """Whether an arithmetic pipe (not the LSU, the memory instructions' path) runs at >= 80%
    of its peak: the pipe is the kernel's roof, and its warps' waiting (few issued
    instructions, stalls on the pipe) is that roof, not a latency problem."""
    return any(v >= PIPE_SATURATED_PCT for p, v in pipe_utilizations(kernel).items() if p != "lsu")


def _occupancy_bound(kernel: KernelProfile, estimate: float | None) -> tuple[bool, float | None]:
    """(whether an occupancy finding applies, its estimated speedup). ncu estimates as if nothing
    else limited the kernel; more warps raise every unit's utilization, so the estimate is capped
    at 100% minus the busiest unit's, and none applies once issue slots, the SM or a pipe
    saturate."""
    units = unit_utilizations(kernel)
    if any(v >= PIPE_SATURATED_PCT for unit, v in units.items() if unit != "memory"):
        return False, None
    if estimate is None or not units:
        return True, estimate
    return True, min(estimate, 100.0 - max(units.values()))


def _evidence(kernel: KernelProfile, *names: str) -> dict[str, float]:
    return {name: kernel.metrics[name] for name in names if name in kernel.metrics}


def _rules(kernel: KernelProfile, accept: Callable[[RuleResult], bool]) -> list[RuleResult]:
    return [rule for rule in kernel.rules if rule.type in _ACTIONABLE and accept(rule)]


def _speedup(rules: list[RuleResult]) -> float | None:
    estimates = [rule.estimated_speedup for rule in rules if rule.estimated_speedup is not None]
    return max(estimates) if estimates else None


def _lines(
    kernel: KernelProfile,
    own_file: str | None,
    rule_ids: tuple[str, ...],
    accept: Callable[[str], bool] = lambda message: True,
) -> list[int]:
    return sorted(
        {
            mk.line
            for mk in kernel.markers
            if mk.file == own_file and mk.rule in rule_ids and accept(mk.message)
        }
    )


def _uncoalesced_global(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    # 0 bytes per sector means the kernel issued no such access at all.
    used = {
        kind: value
        for kind, name in (("loads", m.BYTES_PER_SECTOR_LOAD), ("stores", m.BYTES_PER_SECTOR_STORE))
        if (value := _metric(kernel, name)) is not None and value > 0
    }
    wasteful = {kind: value for kind, value in used.items() if value < UNCOALESCED_BYTES}
    rules = _rules(
        kernel,
        lambda r: (
            r.id == "UncoalescedGlobalAccess"
            or (r.id == "MemoryCacheAccessPattern" and "Global" in r.title)
        ),
    )
    if not wasteful and not any(r.id == "UncoalescedGlobalAccess" for r in rules):
        return []
    described = wasteful or used
    if len(described) == 2 and len({round(v) for v in described.values()}) == 1:
        described = {"loads and stores": described["loads"]}
    message = "; ".join(
        f"global {kind} use {value:.0f} of {FULL_SECTOR_BYTES:.0f} bytes per sector"
        for kind, value in described.items()
    )
    return [
        Finding(
            id="uncoalesced_global_access",
            evidence=_evidence(
                kernel,
                m.BYTES_PER_SECTOR_LOAD,
                m.BYTES_PER_SECTOR_STORE,
                m.GLOBAL_EXCESSIVE_SECTORS,
            ),
            estimated_speedup=_speedup(rules),
            lines=_lines(kernel, own_file, ("UncoalescedGlobalAccess",)),
            message=message or "uncoalesced global accesses (ncu: excessive sectors)",
        )
    ]


def _bank_conflicts(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    wavefronts = [_metric(kernel, name) for name in m.SHARED_WAVEFRONTS]
    conflicts = [_metric(kernel, name) for name in m.BANK_CONFLICTS]
    excessive = _metric(kernel, m.SHARED_EXCESSIVE_WAVEFRONTS)
    measured = [w for w in wavefronts if w is not None]
    fraction = None
    if len(measured) == len(wavefronts) and sum(measured) > 0:
        replays = excessive if excessive is not None else sum(c or 0.0 for c in conflicts)
        fraction = replays / sum(measured)
    rules = _rules(kernel, lambda r: r.id in ("SharedMemoryConflicts", "UncoalescedSharedAccess"))
    if not rules and (fraction is None or fraction < BANK_CONFLICT_FRACTION):
        return []
    share = f"{fraction:.0%} of shared-memory wavefronts are " if fraction is not None else ""
    return [
        Finding(
            id="shared_bank_conflicts",
            evidence=_evidence(
                kernel, *m.BANK_CONFLICTS, *m.SHARED_WAVEFRONTS, m.SHARED_EXCESSIVE_WAVEFRONTS
            ),
            estimated_speedup=_speedup(rules),
            lines=_lines(kernel, own_file, ("UncoalescedSharedAccess", "SharedMemoryConflicts")),
            message=f"{share}bank-conflict replays",
        )
    ]


def _launch_rules(kernel: KernelProfile, title: str) -> list[RuleResult]:
    return _rules(kernel, lambda r: r.id == "LaunchConfiguration" and r.title == title)


def _small_grid(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    grid, sms = _metric(kernel, m.GRID_SIZE), _metric(kernel, m.SM_COUNT)
    rules = _launch_rules(kernel, "Small Grid")
    fewer_blocks_than_sms = grid is not None and sms is not None and grid < sms
    if not rules and not fewer_blocks_than_sms:
        return []
    gpu = f" of the {device}" if device else ""
    if fewer_blocks_than_sms:
        message = f"{grid:.0f} blocks for the {sms:.0f} SMs{gpu}"
    elif grid is not None and sms is not None:
        # ncu also fires this rule on a grid that fills every SM with fewer than two blocks:
        # a block waiting at __syncthreads() then leaves its SM with nothing else to run. Like
        # more occupancy, more blocks per SM can't help once the SM or a pipe is saturated.
        if not _occupancy_bound(kernel, None)[0]:
            return []
        message = (
            f"{grid / sms:.1f} blocks per SM ({grid:.0f} blocks, {sms:.0f} SMs{gpu}): ncu "
            "suggests at least 2, so one block runs while another waits at __syncthreads()"
        )
    else:
        message = "grid smaller than the number of SMs"
    return [
        Finding(
            id="small_grid",
            evidence=_evidence(kernel, m.GRID_SIZE, m.SM_COUNT, m.WAVES),
            estimated_speedup=_speedup(rules),
            message=message,
        )
    ]


def _tail_effect(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    waves = _metric(kernel, m.WAVES)
    rules = _launch_rules(kernel, "Tail Effect")
    tail = tail_fraction(waves)
    if not rules and tail < TAIL_MIN_FRACTION:
        return []
    return [
        Finding(
            id="tail_effect",
            evidence=_evidence(kernel, m.WAVES, m.GRID_SIZE),
            estimated_speedup=_speedup(rules),
            message=f"{waves:.2f} waves: the partial last wave may take {tail:.0%} of the runtime"
            if waves is not None
            else "partial last wave of blocks",
        )
    ]


def tail_fraction(waves: float | None) -> float:
    """The share of the runtime a partial last wave may take (ncu's LaunchStats rule)."""
    if waves is None:
        return 0.0
    partial, whole = math.modf(waves)
    return 1.0 / (whole + 1.0) if whole >= 1.0 and partial > 1e-6 else 0.0


def _achieved_occupancy(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    achieved = _metric(kernel, m.ACHIEVED_OCCUPANCY)
    theoretical = _metric(kernel, m.THEORETICAL_OCCUPANCY)
    if achieved is None or not theoretical or achieved >= ACHIEVED_OCCUPANCY_RATIO * theoretical:
        return []
    applies, speedup = _occupancy_bound(
        kernel, _speedup(_rules(kernel, lambda r: r.id == "AchievedOccupancy"))
    )
    if not applies:
        return []
    return [
        Finding(
            id="low_achieved_occupancy",
            evidence=_evidence(kernel, m.ACHIEVED_OCCUPANCY, m.THEORETICAL_OCCUPANCY),
            estimated_speedup=speedup,
            message=f"achieved occupancy {achieved:.0f}% of the {theoretical:.0f}% possible",
        )
    ]


_LIMITER_FINDING = {
    "registers": "occupancy_limited_registers",
    "shared_memory": "occupancy_limited_shared_memory",
    "warps": "occupancy_limited_block_size",
    "blocks": "occupancy_limited_block_size",
}
_LIMITER_WORDS = {
    "registers": "registers per thread",
    "shared_memory": "shared memory per block",
    "warps": "block size",
    "blocks": "block size (too few threads per block)",
}


def occupancy_limiters(kernel: KernelProfile) -> list[str]:
    """The resources (registers, shared_memory, warps, blocks) holding theoretical occupancy
    below 100%: those allowing the fewest blocks per SM. Empty at full occupancy."""
    theoretical = _metric(kernel, m.THEORETICAL_OCCUPANCY)
    if theoretical is None or theoretical >= FULL_OCCUPANCY_PCT:
        return []
    limits = {
        resource: value
        for resource, name in m.BLOCK_LIMITS.items()
        if resource in _LIMITER_FINDING and (value := _metric(kernel, name)) is not None
    }
    if not limits:
        return []
    fewest = min(limits.values())
    return [resource for resource, value in limits.items() if value == fewest]


def _occupancy_limited(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    theoretical = _metric(kernel, m.THEORETICAL_OCCUPANCY)
    applies, speedup = _occupancy_bound(
        kernel, _speedup(_rules(kernel, lambda r: r.id == "TheoreticalOccupancy"))
    )
    if not applies:
        return []
    findings: dict[str, Finding] = {}
    for resource in occupancy_limiters(kernel):
        finding_id = _LIMITER_FINDING[resource]
        findings.setdefault(
            finding_id,
            Finding(
                id=finding_id,
                evidence=_evidence(
                    kernel, m.THEORETICAL_OCCUPANCY, m.BLOCK_LIMITS[resource], m.REGISTERS
                ),
                estimated_speedup=speedup,
                message=f"theoretical occupancy {theoretical:.0f}%, "
                f"limited by {_LIMITER_WORDS[resource]}",
            ),
        )
    return list(findings.values())


def stall_shares(kernel: KernelProfile) -> dict[str, float]:
    """Each stall reason's share of the cycles between two issued instructions, largest first.
    'selected' (the warp was issuing) is not a stall and is left out."""
    total = _metric(kernel, m.CYCLES_PER_ISSUE)
    if not total:
        return {}
    shares = {}
    for name, value in kernel.metrics.items():
        match = m.STALL.fullmatch(name)
        if match and match.group(1) != "selected":
            shares[match.group(1)] = value / total
    return dict(sorted(shares.items(), key=lambda item: (-item[1], item[0])))


def _stalls(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    issue = _metric(kernel, m.ISSUE_ACTIVE)
    if (issue is not None and issue >= STALL_MAX_ISSUE) or math_pipe_saturated(kernel):
        return []
    findings = []
    for reason, share in stall_shares(kernel).items():
        if share <= STALL_SHARE:
            continue
        words = reason.replace("_", " ")

        # The reason is bound as a default (ruff B023); both are used before the next iteration.
        def is_stall_rule(r: RuleResult, words: str = words) -> bool:
            return r.id == "CPIStall" and r.title.lower() == f"{words} stalls"

        def names_stall(text: str, reason: str = reason) -> bool:
            return (typed := _STALL_TYPE.search(text)) is not None and typed.group(1) == reason

        rules = _rules(kernel, is_stall_rule)
        findings.append(
            Finding(
                id=f"stall_{reason}",
                evidence=_evidence(kernel, m.stall_metric(reason), m.CYCLES_PER_ISSUE),
                estimated_speedup=_speedup(rules),
                lines=_lines(kernel, own_file, ("CPIStall",), names_stall),
                message=f"{words} stalls take {share:.0%} of warp cycles",
            )
        )
    return findings


def _below(
    kernel: KernelProfile,
    *,
    finding_id: str,
    metric: str,
    limit: float,
    rule_id: str,
    words: str,
    without_metric: str,
) -> list[Finding]:
    """The finding when `metric` is below `limit`, or when ncu's rule of the topic fired;
    `words` formats the metric's value for the message."""
    value = _metric(kernel, metric)
    rules = _rules(kernel, lambda r: r.id == rule_id)
    if not rules and (value is None or value >= limit):
        return []
    return [
        Finding(
            id=finding_id,
            evidence=_evidence(kernel, metric),
            estimated_speedup=_speedup(rules),
            message=words.format(value) if value is not None else without_metric,
        )
    ]


def _divergence(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    return _below(
        kernel,
        finding_id="thread_divergence",
        metric=m.THREADS_PER_INSTRUCTION,
        limit=DIVERGENT_THREADS,
        rule_id="ThreadDivergence",
        words="{:.0f} of 32 threads active per instruction",
        without_metric="divergent branches leave lanes idle",
    )


def _issue(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    if math_pipe_saturated(kernel):
        return []
    return _below(
        kernel,
        finding_id="low_issue_utilization",
        metric=m.ISSUE_ACTIVE,
        limit=LOW_ISSUE,
        rule_id="IssueSlotUtilization",
        words="schedulers issue on {:.0%} of cycles",
        without_metric="schedulers often have no eligible warp",
    )


def _spills(kernel: KernelProfile, own_file: str | None, device: str) -> list[Finding]:
    counts = [_metric(kernel, name) for name in (m.SPILL_INSTRUCTIONS, m.SPILL_REQUESTS)]
    if not any(counts):
        return []
    return [
        Finding(
            id="register_spills",
            evidence=_evidence(kernel, m.SPILL_INSTRUCTIONS, m.SPILL_REQUESTS, m.REGISTERS),
            message="registers spill to local memory",
        )
    ]


_DETECTORS = (
    _uncoalesced_global,
    _bank_conflicts,
    _small_grid,
    _tail_effect,
    _achieved_occupancy,
    _occupancy_limited,
    _stalls,
    _divergence,
    _issue,
    _spills,
)

# Tie-break order for findings without an estimate: causes before symptoms.
_ORDER = [
    "uncoalesced_global_access",
    "shared_bank_conflicts",
    "register_spills",
    "small_grid",
    "occupancy_limited_registers",
    "occupancy_limited_shared_memory",
    "occupancy_limited_block_size",
    "thread_divergence",
    "tail_effect",
    "low_achieved_occupancy",
]


def _order_key(finding_id: str) -> int:
    return _ORDER.index(finding_id) if finding_id in _ORDER else len(_ORDER)


def symptom_rank(finding_id: str) -> int:
    """0 for a cause one can fix in the code, 1 for a stall reason, 2 for a general symptom."""
    if finding_id in ("low_issue_utilization", "low_achieved_occupancy"):
        return 2
    return 1 if finding_id.startswith("stall_") else 0
