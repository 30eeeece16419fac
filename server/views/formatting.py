"""Numbers as the user reads them, shared by diagnostics, hover and code actions."""

from __future__ import annotations

from kernelblaster.harness.analysis.ptxas import short_name
from kernelblaster.harness.protocol.records import CheckResult, KernelProfile, KernelResources
from kernelblaster.kb.records import RankedTechnique
from kernelblaster.server.results.history import Change, SaveDelta


def milliseconds(value: float) -> str:
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 1:
        return f"{value:.2f} ms"
    return f"{value:.3g} ms"


def factor(value: float) -> str:
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def kernel_time(profile: KernelProfile | None) -> str | None:
    """ncu's duration of the profiled launch (gpu__time_duration), bare: callers label it, as it
    is not the time per call that the timing measures."""
    if profile is None or profile.duration_ns is None:
        return None
    return milliseconds(profile.duration_ns / 1e6)


def ncu_duration(profile: KernelProfile | None) -> str | None:
    """ "ncu kernel duration 1.44 ms": one profiled launch, as Nsight Compute measured it."""
    duration = kernel_time(profile)
    return f"ncu kernel duration {duration}" if duration else None


def per_call(check: CheckResult | None) -> str | None:
    """ "1.50 ms per call": the median of the timed calls of the whole target, the time the
    save deltas compare."""
    if check is None or check.timing is None:
        return None
    return f"{milliseconds(check.timing.median_ms)} per call"


def ncu_estimate(percent: float) -> str:
    """Nsight Compute's "Est. Speedup" in its own terms: the share of the runtime it estimates a
    fix could save, and the speedup that bounds (saving p of the time is at most 1/(1-p))."""
    if percent >= 100:
        return f"ncu: up to {percent:.0f}% of runtime could be saved"
    bound = 1 / (1 - percent / 100)
    return f"ncu: up to {percent:.0f}% of runtime could be saved (≤ {bound:.1f}×)"


def versus_references(check: CheckResult | None) -> str | None:
    """ "0.55× vs eager, 0.48× vs torch.compile" from the target's check, when measured."""
    if check is None:
        return None
    parts = []
    if check.speedup_vs_eager is not None:
        parts.append(f"{factor(check.speedup_vs_eager)} vs eager")
    if check.speedup_vs_compile is not None:
        parts.append(f"{factor(check.speedup_vs_compile)} vs torch.compile")
    return ", ".join(parts) or None


def timing_line(check: CheckResult, delta: SaveDelta | None = None) -> str:
    """ "verified on 3 fresh input sets; 0.0123 ms per call (median of 50 runs), 2.10× vs
    eager"; led by the change since earlier saves when there is one (`delta`, of this check):
    "0.0123 ms per call (median of 50 runs) — 1.32× faster than the previous save, …; verified
    on 3 fresh input sets, 2.10× vs eager" (the time once, said what it is)."""
    assert check.timing is not None
    verify = check.verify
    if verify is None:
        verified = "ran (no reference output to verify against)"
    elif verify.seeds:
        verified = f"verified on {len(verify.seeds)} fresh input sets"
    else:
        verified = "verified"
    timing = check.timing
    time = f"{milliseconds(timing.median_ms)} per call (median of {timing.repetitions} runs)"
    versus = versus_references(check)
    if delta is not None and (change := delta_line(delta)):
        return f"{time} — {change}; " + ", ".join(part for part in (verified, versus) if part)
    line = f"{verified}; {time}"
    return f"{line}, {versus}" if versus else line


def resources_line(resources: KernelResources) -> str:
    spills = resources.spill_store_bytes + resources.spill_load_bytes
    parts = [
        f"{resources.registers} registers/thread",
        f"{spills} B spilled" if spills else "no spills",
        f"{resources.shared_bytes} B static shared memory",
    ]
    if resources.theoretical_occupancy is not None:
        occupancy = (
            f"theoretical occupancy {resources.theoretical_occupancy:.0%} at "
            f"{resources.occupancy_block_size} threads/block"
        )
        if resources.occupancy_limiter is not None:
            occupancy += f" (limited by {resources.occupancy_limiter.replace('_', ' ')})"
        parts.append(occupancy)
    return ", ".join(parts)


def resources_for(resources: list[KernelResources], kernel: str) -> list[KernelResources]:
    """The entries ptxas reported for the kernel whose function name is `kernel`: one per
    template instantiation or overload (ptxas names each by its mangled name)."""
    return [
        entry
        for entry in resources
        if short_name(entry.demangled) == kernel or entry.name == kernel
    ]


def compiled_signature(resources: KernelResources) -> str:
    """ "tmpl_k<128>(float*)" for "void tmpl_k<128>(float*)": which instantiation an entry is."""
    return resources.demangled.removeprefix("void ")


def profile_for(kernels: list[KernelProfile], kernel: str) -> KernelProfile | None:
    return next((k for k in kernels if k.name == kernel), None)


def proposal_mark(technique: RankedTechnique) -> str:
    """A marker for a technique an agent proposed (kb.records.Proposal): on trial, its
    prediction rests on a conservative prior; promoted, on its measured outcomes."""
    if technique.proposal == "proposed":
        return " *(proposed by an agent, on trial)*"
    if technique.proposal == "promoted":
        return " *(proposed by an agent, promoted by its outcomes)*"
    return ""


def resting_on(technique: RankedTechnique) -> str:
    """How many outcomes `technique`'s prediction rests on: "from 4 outcomes", or "from the
    prior alone" before any (the ranked record carries the count, no query needed)."""
    if technique.attempts == 0:
        return "from the prior alone"
    return f"from {technique.attempts} outcome{'s' if technique.attempts != 1 else ''}"


def track_record(technique: RankedTechnique) -> str:
    """What the KB's prediction for `technique` rests on: the outcomes of the attempts it learned
    from and which kernels they were on ("3 faster, 1 slower, 0 failed, mean 1.90x in 4 attempts
    on sm_90 on kernels with uncoalesced_global_access"), or that there are none yet and what
    the prediction rests on instead."""
    if technique.attempts == 0:
        basis = technique.basis.replace("_", " ")
        return f"{technique.evidence or 'no attempts yet'} (basis: {basis})"
    evidence = technique.evidence or f"{technique.attempts} attempts"
    record = (
        f"{technique.successes} faster, {technique.regressions} slower, {technique.failures} failed"
    )
    if technique.mean_speedup is not None:
        record += f", mean {factor(technique.mean_speedup)}"
    return f"{record} in {evidence}"


def change(value: Change, against: str, same: str) -> str:
    """ "1.32× faster than the previous save" / "1.10× slower since opened", or `same` when
    the two runs' spreads overlap."""
    if value.within_noise:
        return f"{same} (within noise)"
    if value.factor >= 1:
        return f"{factor(value.factor)} faster {against}"
    return f"{factor(1 / value.factor)} slower {against}"


def delta_line(delta: SaveDelta) -> str | None:
    """ "1.32× faster than the previous save, 2.10× faster since opened" (a regression says so),
    or None when there is nothing earlier to compare with."""
    parts = []
    if delta.previous is not None:
        parts.append(change(delta.previous, "than the previous save", "same as the previous save"))
    if delta.since_opened is not None:
        parts.append(change(delta.since_opened, "since opened", "unchanged since opened"))
    if not parts:
        return None
    line = ", ".join(parts)
    return f"regression: {line}" if delta.regression else line
