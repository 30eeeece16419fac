"""The deterministic performance-state classifier: ncu metrics → `PerfState`, in the order of Nsight
Compute's own rule tree: speed of light first (compute- or memory-bound), then what is upstream
when neither is busy (launch, occupancy, latency). Findings (findings.py) add what is fixable;
headroom compares the kernel with its nearest roof. `STATE_VERSION` (harness/protocol/records.py)
changes whenever these rules do."""

from __future__ import annotations

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.findings import (
    find,
    math_pipe_saturated,
    occupancy_limiters,
    pipe_utilizations,
    stall_shares,
    symptom_rank,
    tail_fraction,
)
from kernelblaster.harness.protocol.records import (
    Bottleneck,
    Finding,
    Headroom,
    KernelProfile,
    PerfState,
    ProfileReport,
    Roof,
)

SOL_BUSY_PCT = 60.0  # ncu's SOLBottleneck: below 60% of peak on both sides is a latency issue
NEAR_LIMIT = 0.8  # of any roof
DRAM_STREAMING = 0.9  # DRAM at >= 90% of the busiest memory unit's throughput: DRAM binds
SHORT_KERNEL_NS = 5_000.0  # ours: under 5 µs, launch and ramp-up dominate
OCCUPANCY_BOUND_PCT = 50.0
ACHIEVED_BOUND_RATIO = 0.5
TAIL_BOUND_FRACTION = 1.0 / 3.0
DOMINANT_STALL_SHARE = 0.3
SUMMARY_FINDINGS = 2

_MEMORY_UNITS = (("dram", "DRAM", m.DRAM_PCT), ("l2", "L2", m.L2_PCT), ("l1", "L1", m.L1_PCT))
_PIPE_STATE = {
    "fma": "fp32",
    "alu": "fp32",
    "tensor": "tensor",
    "fp64": "fp64",
    "xu": "xu",
    "lsu": "lsu",
}
_PIPE_WORDS = {
    "fma": "FMA",
    "alu": "ALU",
    "tensor": "tensor",
    "fp64": "FP64",
    "xu": "XU",
    "lsu": "LSU",
}
_ROOF_WORDS = {
    "dram_bandwidth": "DRAM",
    "fp32": "FP32",
    "fp64": "FP64",
    "fp16_tensor": "tensor",
    "sm_throughput": "SM",
}
_HOVER = (
    ("sm_throughput_pct", m.SM_PCT),
    ("memory_throughput_pct", m.MEMORY_PCT),
    ("dram_throughput_pct", m.DRAM_PCT),
    ("l1_throughput_pct", m.L1_PCT),
    ("l2_throughput_pct", m.L2_PCT),
    ("achieved_occupancy_pct", m.ACHIEVED_OCCUPANCY),
    ("theoretical_occupancy_pct", m.THEORETICAL_OCCUPANCY),
    ("registers_per_thread", m.REGISTERS),
)


def classify(kernel: KernelProfile, *, arch: str, device: str = "") -> PerfState:
    """The performance state of one profiled kernel launch. `device` (the GPU's name) only
    words the messages; the same profile always gives the same state."""
    findings = find(kernel, device=device)
    bottleneck, state, phrase = _bottleneck(kernel, findings)
    headroom = _headroom(kernel, compute_bound=bottleneck == "compute")
    near_limit = headroom is not None and headroom.achieved_fraction >= NEAR_LIMIT
    parts = [phrase]
    if near_limit and headroom is not None:
        words = _ROOF_WORDS[headroom.roof]
        parts.append(f"at {headroom.achieved_fraction:.0%} of the {words} roof")
    parts += [finding.message for finding in _summary_findings(state, findings)]
    return PerfState(
        kernel=kernel.name,
        arch=arch,
        bottleneck=bottleneck,
        state=state,
        summary="; ".join(parts),
        findings=findings,
        headroom=headroom,
        near_limit=near_limit,
        metrics=_hover_metrics(kernel),
    )


def classify_report(report: ProfileReport) -> list[PerfState]:
    """The state of each kernel launch in `report`, in its order."""
    return [classify(kernel, arch=report.arch, device=report.device) for kernel in report.kernels]


def launch_durations(report: ProfileReport) -> list[float]:
    """Each launch's GPU time in `report` order; every launch 1.0 when ncu gave no durations."""
    durations = [launch.duration_ns or 0.0 for launch in report.kernels]
    return durations if any(durations) else [1.0] * len(durations)


def kernel_states(report: ProfileReport | None, states: list[PerfState]) -> dict[str, PerfState]:
    """Kernel name -> the state of its longest launch (`states`: one per launch of `report`).
    One rule for the editor and the optimization loop: the launch that costs the most time is
    the one worth describing (a warm-up or a tail launch of the same kernel is not)."""
    if report is None or len(report.kernels) != len(states):
        return {state.kernel: state for state in states}
    longest: dict[str, tuple[float, PerfState]] = {}
    for duration, state in zip(launch_durations(report), states, strict=True):
        if state.kernel not in longest or duration > longest[state.kernel][0]:
            longest[state.kernel] = (duration, state)
    return {name: state for name, (_, state) in longest.items()}


def _summary_findings(state: str, findings: list[Finding]) -> list[Finding]:
    """The findings worth a place in the one-line summary: fixable causes before stalls before
    general symptoms, leaving out the one the state itself already names."""
    named = {
        "launch.small_grid": "small_grid",
        "launch.tail_effect": "tail_effect",
        "latency.divergence": "thread_divergence",
        "occupancy.registers": "occupancy_limited_registers",
        "occupancy.shared_memory": "occupancy_limited_shared_memory",
        "occupancy.block_size": "occupancy_limited_block_size",
        "occupancy.achieved": "low_achieved_occupancy",
    }.get(state, "stall_" + state.removeprefix("latency."))
    candidates = [finding for finding in findings if finding.id != named]
    candidates.sort(key=lambda finding: symptom_rank(finding.id))  # stable: keeps speedup order
    return candidates[:SUMMARY_FINDINGS]


def _pct(kernel: KernelProfile, name: str) -> float | None:
    return kernel.metrics.get(name)


def _bottleneck(kernel: KernelProfile, findings: list[Finding]) -> tuple[Bottleneck, str, str]:
    """ncu's SOLBottleneck: the SM or memory at >= SOL_BUSY_PCT of peak is compute- or memory-bound.
    A saturated math pipe, or the SM near its roof with the tensor pipe busy, is compute-bound
    whatever the memory units show: a tensor-core GEMM's operand traffic keeps L1 as busy as its
    roof."""
    sm, memory = _pct(kernel, m.SM_PCT), _pct(kernel, m.MEMORY_PCT)
    if sm is None and memory is None:
        return "latency", "latency.issue", "no throughput metrics (profile with SpeedOfLight)"
    sm, memory = sm or 0.0, memory or 0.0
    pipes = pipe_utilizations(kernel)
    tensor_cores_at_sm_roof = sm >= NEAR_LIMIT * 100 and pipes.get("tensor", 0.0) >= SOL_BUSY_PCT
    if math_pipe_saturated(kernel) or tensor_cores_at_sm_roof:
        return _compute(kernel, sm, pipes)
    if max(sm, memory) >= SOL_BUSY_PCT:
        return _memory(kernel, memory) if memory >= sm else _compute(kernel, sm, pipes)
    sol = f"SM {sm:.0f}%, memory {memory:.0f}% of peak"
    return _upstream(kernel, findings, sol)


def _memory(kernel: KernelProfile, memory: float) -> tuple[Bottleneck, str, str]:
    """The busiest memory unit names the state, but DRAM does whenever it runs within 10% of it: a
    streaming kernel's L1/L2 traffic is its DRAM traffic passing through."""
    units = [(key, name, value) for key, name, pct in _MEMORY_UNITS if (value := _pct(kernel, pct))]
    if not units:
        return "memory", "memory.dram", f"memory-bound ({memory:.0f}% of peak)"
    key, name, value = max(units, key=lambda unit: unit[2])
    dram = _pct(kernel, m.DRAM_PCT)
    if dram is not None and dram >= DRAM_STREAMING * value:
        key, name, value = "dram", "DRAM", dram
    detail = f"{name} {value:.0f}% of peak"
    if key != "dram" and dram is not None:
        detail += f", DRAM {dram:.0f}%"
    return "memory", f"memory.{key}", f"memory-bound ({detail})"


def _compute(
    kernel: KernelProfile, sm: float, pipes: dict[str, float]
) -> tuple[Bottleneck, str, str]:
    if not any(pipes.values()):
        return "compute", "compute.issue", f"compute-bound (SM {sm:.0f}% of peak)"
    pipe, value = max(pipes.items(), key=lambda item: item[1])
    phrase = f"compute-bound (SM {sm:.0f}% of peak; {_PIPE_WORDS[pipe]} pipe {value:.0f}%)"
    return "compute", f"compute.{_PIPE_STATE[pipe]}", phrase


def _upstream(
    kernel: KernelProfile, findings: list[Finding], sol: str
) -> tuple[Bottleneck, str, str]:
    """Neither unit busy: launch (less than a wave, too short, a heavy tail), then occupancy
    (theoretical or achieved), then latency (a dominant stall reason, divergence, else issue)."""
    waves = _pct(kernel, m.WAVES)
    grid, sms = _pct(kernel, m.GRID_SIZE), _pct(kernel, m.SM_COUNT)
    if (waves is not None and waves < 1.0) or (grid is not None and sms and grid < sms):
        shape = f"{grid:.0f} blocks, " if grid is not None else ""
        fill = f"{waves:.2f} waves" if waves is not None else "less than one wave"
        return "launch", "launch.small_grid", f"launch-bound ({shape}{fill}; {sol})"
    duration = kernel.duration_ns
    if duration is not None and duration < SHORT_KERNEL_NS:
        return "launch", "launch.overhead", f"launch-bound ({duration / 1e3:.1f} µs; {sol})"
    tail = tail_fraction(waves)
    if tail >= TAIL_BOUND_FRACTION:
        return (
            "launch",
            "launch.tail_effect",
            f"launch-bound (partial last wave ~{tail:.0%}; {sol})",
        )
    theoretical = _pct(kernel, m.THEORETICAL_OCCUPANCY)
    limiters = occupancy_limiters(kernel)
    if theoretical is not None and theoretical <= OCCUPANCY_BOUND_PCT and limiters:
        limiter = "block_size" if limiters[0] in ("warps", "blocks") else limiters[0]
        words = limiter.replace("_", " ")
        phrase = f"occupancy-bound (theoretical {theoretical:.0f}%, limited by {words}; {sol})"
        return "occupancy", f"occupancy.{limiter}", phrase
    achieved = _pct(kernel, m.ACHIEVED_OCCUPANCY)
    if achieved is not None and theoretical and achieved < ACHIEVED_BOUND_RATIO * theoretical:
        phrase = f"occupancy-bound (achieved {achieved:.0f}% of {theoretical:.0f}%; {sol})"
        return "occupancy", "occupancy.achieved", phrase
    shares = stall_shares(kernel)
    top = next(iter(shares.items()), None)
    if top is not None and top[1] > DOMINANT_STALL_SHARE:
        reason, share = top
        words = reason.replace("_", " ")
        phrase = f"latency-bound ({sol}; {words} stalls {share:.0%} of warp cycles)"
        return "latency", f"latency.{reason}", phrase
    if any(finding.id == "thread_divergence" for finding in findings):
        return "latency", "latency.divergence", f"latency-bound ({sol}; divergent warps)"
    return "latency", "latency.issue", f"latency-bound ({sol})"


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _flops_fraction(kernel: KernelProfile, ops: tuple[str, str, str], peak: str) -> float | None:
    """Achieved over peak FLOPs per cycle; an FMA (the third op) counts twice."""
    add, mul, fma = (_pct(kernel, name) for name in ops)
    if add is None or mul is None or fma is None:
        return None
    return _ratio(add + mul + 2.0 * fma, _pct(kernel, peak))


def _headroom(kernel: KernelProfile, *, compute_bound: bool) -> Headroom | None:
    """The kernel against its nearest roof (DRAM bandwidth, a pipe's FLOP/s or utilization, the SM's
    speed of light when compute-bound): at >= NEAR_LIMIT of any, it is `near_limit`."""
    per_second = _pct(kernel, m.DRAM_BYTES_PER_SECOND)
    peak_per_cycle = _pct(kernel, m.DRAM_BYTES_PEAK_PER_CYCLE)
    cycles = _pct(kernel, m.DRAM_CYCLES_PER_SECOND)
    dram = _ratio(per_second, peak_per_cycle * cycles if peak_per_cycle and cycles else None)
    if dram is None and (dram_pct := _pct(kernel, m.DRAM_PCT)) is not None:
        dram = dram_pct / 100.0
    pipes = {pipe: value / 100.0 for pipe, value in pipe_utilizations(kernel).items()}
    tensor = [value / 100.0 for name in m.TENSOR_PCT if (value := _pct(kernel, name)) is not None]
    # A roof is reached by FLOPs at the pipe's peak rate, or by the pipe busy every cycle
    # (what a quick pass measures, and what counts mma instructions whatever their FLOPs).
    # The ALU pipe (integer and logic) is no FLOP roof.
    compute: dict[Roof, list[float | None]] = {
        "fp16_tensor": [*tensor, pipes.get("tensor")],
        "fp32": [
            _flops_fraction(kernel, m.FP32_OPS_PER_CYCLE, m.FP32_PEAK_FLOPS_PER_CYCLE),
            pipes.get("fma"),
        ],
        "fp64": [
            _flops_fraction(kernel, m.FP64_OPS_PER_CYCLE, m.FP64_PEAK_FLOPS_PER_CYCLE),
            pipes.get("fp64"),
        ],
    }
    roofs: dict[Roof, float] = {
        roof: max(measured)
        for roof, values in compute.items()
        if (measured := [value for value in values if value])
    }
    if dram is not None:
        roofs["dram_bandwidth"] = dram
    # A compute-bound kernel at the SM's speed of light is at a roof even when no single
    # pipe shows it (the SM's throughput is the busiest of its units).
    sm = (_pct(kernel, m.SM_PCT) or 0.0) / 100.0
    if compute_bound and sm >= NEAR_LIMIT > max(roofs.values(), default=0.0):
        roofs["sm_throughput"] = sm
    if not roofs:
        return None
    roof = max(sorted(roofs), key=lambda name: roofs[name])
    return Headroom(roof=roof, achieved_fraction=roofs[roof])


def _hover_metrics(kernel: KernelProfile) -> dict[str, float]:
    shown = {key: kernel.metrics[name] for key, name in _HOVER if name in kernel.metrics}
    if kernel.duration_ns is not None:
        shown = {"duration_us": kernel.duration_ns / 1e3, **shown}
    return shown
