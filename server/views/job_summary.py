"""What the end of a save's job says (`kernelblaster/jobStatus`): a headline for a status bar,
led by the change since the previous save ("softmax.cu 1.33× faster · memory-bound"), and the
whole line for its tooltip and the progress's end. Every time in them says what it is: the time
per call (the median the deltas compare) or ncu's kernel duration, never one for the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.results.history import SaveDelta
from kernelblaster.server.views import formatting


@dataclass(frozen=True)
class JobSummary:
    headline: str  # starts with the file's name: the status bar shows no other
    message: str  # without the file's name, which the client shows beside it


def job_summary(result: FileResult, delta: SaveDelta | None) -> JobSummary:
    name = Path(result.source).name
    response = result.response
    if response.error is not None:
        return JobSummary(f"{name}: {response.error.message}", response.error.message)
    build = response.build
    if build is not None and not build.ok:
        errors = sum(d.severity == "error" for d in build.diagnostics)
        failed = f"build failed ({errors} error{'s' if errors != 1 else ''})"
        return JobSummary(f"{name}: {failed}", failed)
    check = response.check
    if check and check.verify and not check.verify.ok:
        return JobSummary(f"{name}: wrong result", f"wrong result — {check.verify.message}")
    kernels = _kernel_lines(result)
    head = next(iter(result.states.values())).summary if result.states else None
    state_head = head.split(" (", 1)[0].split(";", 1)[0] if head else None
    timing = None
    if check is not None and check.timing is not None:
        timing = formatting.timing_line(check, delta)
    lead = _lead(delta) or formatting.per_call(check)
    first = f"{name} {lead}" if lead else name
    headline = f"{first} · {state_head}" if state_head else first if lead else f"{name}: built"
    message = "; ".join(part for part in (timing, kernels) if part) or "built"
    return JobSummary(headline, message)


def _lead(delta: SaveDelta | None) -> str | None:
    """ "1.33× faster" (than the previous save), or None without a previous save."""
    if delta is None or delta.previous is None:
        return None
    change = delta.previous
    if change.within_noise:
        return "same speed (within noise)"
    if change.factor >= 1:
        return f"{formatting.factor(change.factor)} faster"
    return f"{formatting.factor(1 / change.factor)} slower"


def _kernel_lines(result: FileResult) -> str | None:
    """ "k: memory-bound (…), ncu kernel duration 0.288 ms, 0.10× vs eager (+4 more kernels)" """
    profile = result.response.profile
    parts = []
    for kernel, state in result.states.items():
        kernel_profile = formatting.profile_for(profile.kernels, kernel) if profile else None
        measured = [
            m
            for m in (
                formatting.ncu_duration(kernel_profile),
                formatting.versus_references(result.response.check),
            )
            if m
        ]
        parts.append(
            f"{kernel}: {state.summary}" + (f", {', '.join(measured)}" if measured else "")
        )
    if not parts:
        return None
    return parts[0] + (f" (+{len(parts) - 1} more kernels)" if len(parts) > 1 else "")
