"""Read an Nsight Compute report (.ncu-rep) into a `ProfileReport`, without ncu or a GPU, through
NVIDIA's `ncu_report` package: per kernel launch its names, launch configuration, the metrics in
`ncu_metrics.KEPT`, its rule results and source markers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec
import ncu_report

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.ncu_markup import strip_markup
from kernelblaster.harness.protocol.records import (
    KernelProfile,
    LaunchConfig,
    ProfileDepth,
    ProfileReport,
    RuleResult,
    SourceMarker,
)

# ncu_report's message types (IFrontend::MsgType) as ncu's CLI shows them: OK prints as INF.
_RULE_TYPE: dict[int, Literal["info", "warning", "error", "optimization"]] = {
    ncu_report.MsgType_NONE: "info",
    ncu_report.MsgType_OK: "info",
    ncu_report.MsgType_OPTIMIZATION: "optimization",
    ncu_report.MsgType_WARNING: "warning",
    ncu_report.MsgType_ERR: "error",
}
_MARKER_KIND: dict[int, Literal["info", "warning", "optimization"]] = {
    ncu_report.MsgType_OPTIMIZATION: "optimization",
    ncu_report.MsgType_WARNING: "warning",
    ncu_report.MsgType_ERR: "warning",
}
_SPEEDUP_KIND: dict[int, Literal["global", "local"]] = {
    ncu_report.SpeedupType_GLOBAL: "global",
    ncu_report.SpeedupType_LOCAL: "local",
}


class ReportError(ValueError):
    """A file that is not a readable Nsight Compute report with profiled kernels."""


def read_report(
    path: Path,
    *,
    depth: ProfileDepth = "full",
    source_map: dict[str, str] | None = None,
) -> ProfileReport:
    """Every profiled kernel launch in the report at `path`.

    `depth` records which pass produced the report. `source_map` maps source paths as the report
    records them (e.g. "/src/five.cu", where the program was built) to the user's files; paths
    not in it are kept as recorded."""
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"{path}: no such report file")
    try:
        context = ncu_report.load_report(str(path))
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read as an Nsight Compute report: {exc}") from exc
    kernels = [
        _kernel(action, source_map or {})
        for action in _actions(context)
        if action.workload_type() == action.WorkloadType_KERNEL
    ]
    if not kernels:
        raise ReportError(
            f"{path}: holds no profiled kernels; it is not an Nsight Compute report, it is "
            "truncated, or ncu profiled nothing (check its kernel filter)"
        )
    first = next(iter(_actions(context)))
    return ProfileReport(
        device=str(_value(first, "device__attribute_display_name") or ""),
        arch=_arch(first),
        depth=depth,
        report_path=str(path),
        kernels=kernels,
    )


def remap_sources(report: ProfileReport, source_map: dict[str, str]) -> ProfileReport:
    """`report` with its markers' files renamed through `source_map` (recorded path → user's)."""
    kernels = [
        msgspec.structs.replace(
            kernel,
            markers=[
                msgspec.structs.replace(marker, file=source_map.get(marker.file, marker.file))
                for marker in kernel.markers
            ],
        )
        for kernel in report.kernels
    ]
    return msgspec.structs.replace(report, kernels=kernels)


def _actions(context: Any) -> Iterable[Any]:
    for range_index in range(context.num_ranges()):
        profiled_range = context.range_by_idx(range_index)
        for action_index in range(profiled_range.num_actions()):
            yield profiled_range.action_by_idx(action_index)


def _value(action: Any, name: str) -> float | str | None:
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    return metric.value()


def _arch(action: Any) -> str:
    major = _value(action, "device__attribute_compute_capability_major")
    minor = _value(action, "device__attribute_compute_capability_minor")
    return f"sm_{int(major)}{int(minor)}" if major is not None and minor is not None else ""


def _kernel(action: Any, source_map: dict[str, str]) -> KernelProfile:
    metrics = _metrics(action)
    return KernelProfile(
        name=action.name(action.NameBase_FUNCTION),
        demangled=action.name(action.NameBase_DEMANGLED),
        duration_ns=metrics.get(m.DURATION),
        launch=_launch(metrics),
        metrics=metrics,
        rules=_rules(action),
        markers=_markers(action, source_map),
    )


def _metrics(action: Any) -> dict[str, float]:
    kept: dict[str, float] = {}
    for name in sorted(action.metric_names()):
        if not m.is_kept(name):
            continue
        value = _value(action, name)
        if isinstance(value, int | float):
            kept[name] = float(value)
    return kept


def _launch(metrics: dict[str, float]) -> LaunchConfig:
    def dims(names: tuple[str, str, str]) -> list[int]:
        return [int(metrics.get(name, 1)) for name in names]

    return LaunchConfig(
        grid=dims(m.GRID_DIMS),
        block=dims(m.BLOCK_DIMS),
        registers_per_thread=int(metrics.get(m.REGISTERS, 0)),
        shared_static_bytes=int(metrics.get(m.SHARED_STATIC, 0)),
        shared_dynamic_bytes=int(metrics.get(m.SHARED_DYNAMIC, 0)),
        waves_per_sm=metrics.get(m.WAVES),
    )


def _rules(action: Any) -> list[RuleResult]:
    results = []
    for rule in action.rule_results_as_dicts():
        message = rule.get("rule_message") or {}
        text = strip_markup(message.get("message") or "").strip()
        if not text:
            continue  # results that only carry a table for the GUI
        speedup = rule.get("speedup_estimation") or {}
        results.append(
            RuleResult(
                id=rule["rule_identifier"],
                section=rule.get("section_identifier", ""),
                type=_RULE_TYPE.get(message.get("type", 0), "info"),
                title=message.get("title") or rule.get("name", ""),
                message=text,
                estimated_speedup=speedup.get("speedup"),
                speedup_kind=_SPEEDUP_KIND.get(speedup.get("type", ncu_report.SpeedupType_UNKNOWN)),
            )
        )
    return results


def _markers(action: Any, source_map: dict[str, str]) -> list[SourceMarker]:
    """Source markers pinned to lines. A SASS-level marker carries the specific message (a
    source-level one on warp stalls only says "see the SASS lines"), so it wins on its line;
    without -lineinfo it has no line and is dropped."""
    sass_level: list[SourceMarker] = []
    source_level: list[SourceMarker] = []
    for raw in action.source_markers():
        if raw["kind"] == ncu_report.MarkerKind_SASS:
            info = action.source_info(raw["source_address"])
            if info is None or not info.file_name() or info.line() <= 0:
                continue  # built without -lineinfo: no line to pin it to
            file, line, into = info.file_name(), info.line(), sass_level
        elif raw["kind"] == ncu_report.MarkerKind_SOURCE:
            location = raw["source_location"]
            file, line, into = location["file_name"], location["line"], source_level
        else:
            continue
        into.append(
            SourceMarker(
                file=source_map.get(file, file),
                line=line,
                rule=raw["rule_identifier"],
                kind=_MARKER_KIND.get(raw["message_type"], "info"),
                message=strip_markup(raw["message"]).strip(),
            )
        )
    covered = {(marker.file, marker.line, marker.rule) for marker in sass_level}
    kept = sass_level + [
        marker for marker in source_level if (marker.file, marker.line, marker.rule) not in covered
    ]
    unique = {(mk.file, mk.line, mk.rule, mk.message): mk for mk in kept}
    return [unique[key] for key in sorted(unique)]
