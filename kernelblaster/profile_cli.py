"""`kernelblaster analyze REPORT.ncu-rep`: classify every kernel of a saved Nsight Compute report
and rank what to try for each with the knowledge base (the ranking the editor's hover shows).

Works on any machine (no GPU, no ncu): the report is read with the `ncu_report` package.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import msgspec

from kernelblaster.check_cli import add_target_arguments, run_task
from kernelblaster.harness.analysis.check_report import format_check_result, format_error
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.findings import kernel_source_file
from kernelblaster.harness.analysis.ncu_reader import ReportError, read_report, remap_sources
from kernelblaster.harness.protocol.records import KernelProfile, PerfState, ProfileReport
from kernelblaster.input_files import file_problem
from kernelblaster.kb.fallback import open_or_fallback
from kernelblaster.kb.records import RankedTechnique
from kernelblaster.kb.store import default_path
from kernelblaster.settings import SettingsError, load_settings

TEXT_TECHNIQUES = 5  # ranked techniques printed per kernel (JSON has them all)


def register(subparsers: argparse._SubParsersAction) -> None:
    analyze = subparsers.add_parser(
        "analyze",
        help="classify the kernels of a saved Nsight Compute report (.ncu-rep); no GPU needed",
    )
    analyze.add_argument("report", help="the .ncu-rep file")
    analyze.add_argument(
        "--source",
        help="the .cu file the kernels were built from, when it has moved since profiling "
        "(matched to the report's recorded file by name)",
    )
    analyze.add_argument("--json", action="store_true", help="print the result as JSON")
    analyze.set_defaults(func=cmd_analyze)

    profile = subparsers.add_parser(
        "profile", help="check the kernel, then profile it with Nsight Compute and classify it"
    )
    add_target_arguments(profile)
    profile.add_argument("--full", action="store_true", help="the full ncu section set")
    profile.add_argument(
        "--keep", help="copy the .ncu-rep here (e.g. to keep it as a test fixture)"
    )
    profile.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    """check + ncu + classification, all in the worker; then printed like `analyze`."""
    response = run_task(args, "profile")
    if response is None:
        return 2
    if response.check is not None and not args.json:
        print(format_check_result(response.check), file=sys.stderr)
    report = response.profile
    if report is None:
        error = response.error
        print(format_error(error) if error else "error: no profile was produced", file=sys.stderr)
        return 1
    if args.keep and report.report_path:
        shutil.copy(report.report_path, args.keep)
    states = response.states
    source = Path(args.file).resolve()
    rankings = _rank(states, source)
    if rankings is None:
        return 2
    if args.json:
        document = _json_document(report, states, rankings)
        document["check"] = msgspec.to_builtins(response.check) if response.check else None
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(document).decode(), indent=2))
        sys.stdout.write("\n")
    else:
        print(_text(report, states, rankings, source))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    try:
        report = read_report(Path(args.report))
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = Path(args.source).resolve() if args.source else None
    if source is not None:
        if problem := file_problem(args.source):
            print(f"error: --source {problem}", file=sys.stderr)
            return 2
        report = _map_source(report, source)
    states = classify_report(report)  # a saved report: classified here, as the worker would
    rankings = _rank(states, source or Path(args.report).resolve())
    if rankings is None:
        return 2
    if args.json:
        document = _json_document(report, states, rankings)
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(document).decode(), indent=2))
        sys.stdout.write("\n")
    else:
        print(_text(report, states, rankings, source))
    return 0


def _rank(states: list[PerfState], near: Path) -> list[list[RankedTechnique]] | None:
    """Each state's ranking from the user's KB (the workspace of `near` names it, as for the
    editor); None after printing why the settings can't be read."""
    try:
        settings = load_settings(near, only=frozenset({"kb_path"}))  # the KB is all it needs
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    kb, problem = open_or_fallback(default_path(settings.kb_path))
    if problem:
        print(f"warning: {problem}", file=sys.stderr)
    with kb:
        return [kb.rank(state.arch, state.state, state.findings) for state in states]


def _map_source(report: ProfileReport, source: Path) -> ProfileReport:
    recorded = sorted({mk.file for kernel in report.kernels for mk in kernel.markers})
    matching = {file: str(source) for file in recorded if Path(file).name == source.name}
    if recorded and not matching:
        names = ", ".join(sorted({Path(file).name for file in recorded}))
        print(
            f"warning: the report's source lines are in {names}, not {source.name}; "
            "line numbers refer to those files",
            file=sys.stderr,
        )
    return remap_sources(report, matching)


def _kernel_json(
    kernel: KernelProfile, state: PerfState, ranked: list[RankedTechnique]
) -> dict[str, Any]:
    body = msgspec.to_builtins(state)
    return {
        "name": body.pop("kernel"),
        "demangled": kernel.demangled,
        "file": kernel_source_file(kernel.markers),
        **body,
        "ranking": [
            {
                "technique": r.technique,
                "predicted_speedup": r.predicted_speedup,
                "confidence": r.confidence,
                "basis": r.basis,
                "evidence": r.evidence,
                # "proposed" (by an agent, on trial) or "promoted"; null: a catalog technique
                "proposal": r.proposal,
            }
            for r in ranked
        ],
    }


def _json_document(
    report: ProfileReport, states: list[PerfState], rankings: list[list[RankedTechnique]]
) -> dict[str, Any]:
    return {
        "report": report.report_path,
        "device": report.device,
        "arch": report.arch,
        "depth": report.depth,
        "kernels": [
            _kernel_json(kernel, state, ranked)
            for kernel, state, ranked in zip(report.kernels, states, rankings, strict=True)
        ],
    }


def _source_lines(source: Path | None) -> list[str]:
    if source is None:
        return []
    return source.read_text(encoding="utf-8", errors="replace").splitlines()


def _text(
    report: ProfileReport,
    states: list[PerfState],
    rankings: list[list[RankedTechnique]],
    source: Path | None,
) -> str:
    text_lines = _source_lines(source)
    out = [f"{report.report_path}: {report.device} ({report.arch}), {len(states)} kernel(s)"]
    for kernel, state, ranked in zip(report.kernels, states, rankings, strict=True):
        duration = f"  {kernel.duration_ns / 1e3:.1f} µs" if kernel.duration_ns else ""
        out += ["", f"{kernel.name}  [{state.state}]{duration}", f"  {state.summary}"]
        if state.headroom is not None:
            limit = "  (near the limit)" if state.near_limit else ""
            out.append(
                f"  headroom: {state.headroom.achieved_fraction:.0%} of the "
                f"{state.headroom.roof} roof{limit}"
            )
        file = kernel_source_file(kernel.markers)
        for finding in state.findings:
            estimate = (
                f" (ncu est. {finding.estimated_speedup:.0f}%)"
                if finding.estimated_speedup is not None
                else ""
            )
            out.append(f"  - {finding.id}{estimate}: {finding.message}")
            for line in finding.lines:
                shown = (
                    text_lines[line - 1].strip()
                    if file == str(source) and 0 < line <= len(text_lines)
                    else ""
                )
                out.append(f"      {Path(file or '?').name}:{line}  {shown}".rstrip())
        if ranked:
            out.append("  to try (knowledge base):")
        for position, technique in enumerate(ranked[:TEXT_TECHNIQUES], start=1):
            mark = f" [{technique.proposal}]" if technique.proposal else ""
            out.append(
                f"    {position}. {technique.title}{mark}: predicted "
                f"{technique.predicted_speedup:.2f}x "
                f"(confidence {technique.confidence:.0%}; {technique.explanation})"
            )
    return "\n".join(out)
