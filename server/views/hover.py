"""Hover on a kernel: its state, key metrics, time against PyTorch eager and torch.compile, and
the knowledge base's ranked optimizations with predicted gain, confidence and track record.
Pure Markdown from cached results; nothing runs while the user waits."""

from __future__ import annotations

from kernelblaster.harness.protocol.records import CheckResult, KernelProfile, PerfState
from kernelblaster.kb.records import RankedTechnique
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.results.history import HistoryPoint, SaveDelta
from kernelblaster.server.views import formatting
from kernelblaster.server.views.headroom import limiting_roof

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
        lines += ["", limiting_roof(state, profile).line]
        if not current:
            lines += ["", "*From the profile of an earlier version of this file; save to refresh.*"]
    elif result is None:
        lines += ["", _NOT_PROFILED]
    lines += _measurements(profile, response.check if response else None)
    lines += _progress(delta, history or [], result.text_hash if result else None)
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
    """The times, each saying what it measures: the timing's median per call (the figure the
    save deltas compare), PyTorch's, and ncu's duration of its one profiled launch."""
    rows = []
    if check is not None and check.timing is not None:
        runs = f"median of {check.timing.repetitions} runs"
        median = formatting.milliseconds(check.timing.median_ms)
        rows.append((f"per call, whole target ({runs})", median))
        for label, reference, speedup in (
            ("PyTorch eager", check.eager, check.speedup_vs_eager),
            ("torch.compile", check.compiled, check.speedup_vs_compile),
        ):
            if reference is not None:
                versus = f" (speedup {formatting.factor(speedup)})" if speedup else ""
                time = formatting.milliseconds(reference.median_ms)
                rows.append((f"{label}, per call", time + versus))
    if kernel_time := formatting.kernel_time(profile):
        rows.append(("kernel duration (ncu, one profiled launch)", kernel_time))
    lines = []
    if rows:
        table = [f"| {name} | {value} |" for name, value in rows]
        lines = ["", "| time | value |", "|:---|---:|", *table]
    if profile is not None:
        launch = profile.launch
        lines += [
            "",
            f"Launch: grid {_dims(launch.grid)}, block {_dims(launch.block)}, "
            f"{launch.registers_per_thread} registers/thread",
        ]
    return lines


_BARS = "▁▂▃▄▅▆▇█"


def _progress(
    delta: SaveDelta | None, history: list[HistoryPoint], text_hash: str | None
) -> list[str]:
    """The change since the previous save and since opened, and the saves' times as a
    sparkline (taller is slower). A save verified and timed whose profile still runs is not in
    the history yet: its time is the sparkline's last, as the delta beside it is."""
    lines = []
    if delta is not None and (change := formatting.delta_line(delta)):
        lines += ["", f"**{formatting.milliseconds(delta.median_ms)} per call — {change}**"]
    times = [p.median_ms for p in history]
    if delta is not None and (not history or history[-1].text_hash != text_hash):
        times.append(delta.median_ms)
    if len(times) >= 2:
        times = times[-20:]
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
            f" ({formatting.ncu_estimate(finding.estimated_speedup)})"
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
