"""Hover on a kernel: its state, key metrics, time against PyTorch eager and torch.compile, and
the knowledge base's ranked optimizations with predicted gain, confidence and track record.
Pure Markdown from cached results; nothing runs while the user waits."""

from __future__ import annotations

from kernelblaster.harness.protocol.records import CheckResult, KernelProfile, PerfState
from kernelblaster.kb.records import RankedTechnique
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.results.history import HistoryPoint, SaveDelta
from kernelblaster.server.views import formatting

_NOT_PROFILED = "Not profiled yet: save the file to build, check and profile it."


def kernel_hover(
    kernel: str,
    result: FileResult | None,
    ranked: list[RankedTechnique],
    *,
    current: bool,
    note: str | None = None,
    delta: SaveDelta | None = None,
    history: list[HistoryPoint] | None = None,
) -> str:
    lines = [f"### `{kernel}`"]
    if note:
        lines += ["", f"*{note}*"]
    state = result.states.get(kernel) if result else None
    response = result.response if result else None
    profile = (
        formatting.profile_for(response.profile.kernels, kernel)
        if response and response.profile
        else None
    )
    if state is not None:
        lines += ["", f"**{state.summary}**", "", f"state `{state.state}` on {state.arch}"]
        if not current:
            lines += ["", "*From the profile of an earlier version of this file; save to refresh.*"]
    elif result is None:
        lines += ["", _NOT_PROFILED]
    lines += _measurements(profile, response.check if response else None)
    lines += _progress(delta, history or [])
    build = response.build if response else None
    compiled = formatting.resources_for(build.resources, kernel) if build is not None else []
    if len(compiled) == 1:
        lines += ["", f"Resources: {formatting.resources_line(compiled[0])}"]
    elif compiled:  # a template's instantiations (or overloads), each with its own usage
        lines += ["", "Resources:"] + [
            f"- `{formatting.compiled_signature(entry)}`: {formatting.resources_line(entry)}"
            for entry in compiled
        ]
    if state is not None:
        lines += _metrics(state)
        lines += _findings(state)
    lines += _ranking(ranked, state)
    return "\n".join(lines)


def _measurements(profile: KernelProfile | None, check: CheckResult | None) -> list[str]:
    rows = []
    if kernel_time := formatting.kernel_time(profile):
        rows.append(("kernel (ncu)", kernel_time))
    if check is not None and check.timing is not None:
        rows.append(("whole target, median", formatting.milliseconds(check.timing.median_ms)))
        for label, reference, speedup in (
            ("PyTorch eager", check.eager, check.speedup_vs_eager),
            ("torch.compile", check.compiled, check.speedup_vs_compile),
        ):
            if reference is not None:
                versus = f" (speedup {formatting.factor(speedup)})" if speedup else ""
                rows.append((label, formatting.milliseconds(reference.median_ms) + versus))
    if profile is not None:
        launch = profile.launch
        rows.append(
            (
                "launch",
                f"grid {_dims(launch.grid)}, block {_dims(launch.block)}, "
                f"{launch.registers_per_thread} registers/thread",
            )
        )
    if not rows:
        return []
    return ["", "| time | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]


_BARS = "▁▂▃▄▅▆▇█"


def _progress(delta: SaveDelta | None, history: list[HistoryPoint]) -> list[str]:
    """The change since the previous save and since opened, and the saves' times as a
    sparkline (taller is slower)."""
    lines = []
    if delta is not None and (change := formatting.delta_line(delta)):
        lines += ["", f"**{formatting.milliseconds(delta.median_ms)} — {change}**"]
    if len(history) >= 2:
        times = [p.median_ms for p in history[-20:]]
        low, high = min(times), max(times)
        bars = "".join(
            _BARS[round((t - low) / (high - low) * (len(_BARS) - 1)) if high > low else 0]
            for t in times
        )
        lines += [
            "",
            f"Last {len(times)} saves (median per call, oldest first): `{bars}` "
            f"{formatting.milliseconds(times[0])} → {formatting.milliseconds(times[-1])}, "
            f"best {formatting.milliseconds(low)}",
        ]
    return lines


def _dims(values: list[int]) -> str:
    return "×".join(map(str, values))


def _metrics(state: PerfState) -> list[str]:
    if not state.metrics:
        return []
    return [
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {name} | {value:.3g} |" for name, value in state.metrics.items()),
    ]


def _findings(state: PerfState) -> list[str]:
    if not state.findings:
        return []
    lines = ["", "Findings:"]
    for finding in state.findings:
        where = f" (line {', '.join(map(str, finding.lines))})" if finding.lines else ""
        gain = (
            f", ncu estimates up to {finding.estimated_speedup:.0f}%"
            if finding.estimated_speedup is not None
            else ""
        )
        lines.append(f"- `{finding.id}`{where}{gain}: {finding.message}")
    return lines


def _ranking(ranked: list[RankedTechnique], state: PerfState | None) -> list[str]:
    if not ranked:
        return []
    heading = "Optimizations ranked by the knowledge base"
    if state is not None:
        heading += f" for `{state.state}` on {state.arch}"
    lines = ["", f"**{heading}:**", ""]
    for position, technique in enumerate(ranked, start=1):
        lines.append(
            f"{position}. **{technique.title}**{formatting.proposal_mark(technique)} — predicted "
            f"{formatting.factor(technique.predicted_speedup)} "
            f"{formatting.resting_on(technique)} (confidence {technique.confidence:.0%}); "
            + formatting.track_record(technique)
        )
    return lines
