"""A file's diagnostics, computed from its last result and the kernels located in its text.

Pure: no server, no I/O. Lines in harness records are 1-based; LSP's are 0-based. Ranges here
are in Python characters; the server converts them to the client's encoding."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types

from kernelblaster.harness.protocol.records import (
    EXPECTED_ERROR_KINDS,
    SETUP_ERROR_KINDS,
    CheckResult,
    Finding,
    HackFinding,
    HarnessError,
    KernelProfile,
    KernelResources,
    PerfState,
    SourceDiagnostic,
    SourcePosition,
    VerifyWarning,
)
from kernelblaster.server.editor.documents import line_range, path_to_uri, same_source
from kernelblaster.server.editor.kernel_locator import KernelSpan, by_name
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.results.history import SaveDelta
from kernelblaster.server.views import formatting

SOURCE = "kernelblaster"
# ncu's estimated gain (percent of the kernel's time) from which a line finding is a warning.
WARNING_GAIN = 20.0
INFORMATION_GAIN = 5.0

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}
_EARLIER = " (profile of an earlier version of this file)"


@dataclass(frozen=True)
class FileContext:
    uri: str
    path: Path
    lines: list[str]
    kernels: tuple[KernelSpan, ...]


def severity_for_gain(percent: float | None) -> types.DiagnosticSeverity:
    if percent is not None and percent >= WARNING_GAIN:
        return types.DiagnosticSeverity.Warning
    if percent is not None and percent >= INFORMATION_GAIN:
        return types.DiagnosticSeverity.Information
    return types.DiagnosticSeverity.Hint


def file_diagnostics(
    result: FileResult, context: FileContext, *, text_hash: str, delta: SaveDelta | None = None
) -> list[types.Diagnostic]:
    """All diagnostics of `result` for the text hashed `text_hash`. What came from another
    version of the text (the text changed since, or a new profile is still running) shows only
    where it is pinned to a kernel by name, marked as coming from the earlier version. `delta`:
    how the timing compares with the file's earlier saves (history.py)."""
    response = result.response
    build = response.build
    profile = response.profile
    profiled = {k.name: k for k in profile.kernels} if profile else {}
    current = result.text_hash == text_hash
    profile_current = result.profiled_text_hash == text_hash
    found: list[types.Diagnostic] = []
    if current and build is not None:
        found += [_build_diagnostic(d, context) for d in build.diagnostics]
    if current:
        found += _error_diagnostics(result, context)
        found += _verify_diagnostics(response.check, context)
        found += _timing_diagnostics(response.check, context, delta)
    resources_suffix = "" if current else _EARLIER
    for span in context.kernels:
        state = result.states.get(span.name)
        kernel_profile = profiled.get(span.name)
        if state is not None:
            if profile_current:
                found.append(_state_diagnostic(span, state, kernel_profile, response.check, ""))
                found += _line_diagnostics(span, state, kernel_profile, context)
            else:  # the speedups, if any, are the new check's: not this profile's
                found.append(_state_diagnostic(span, state, kernel_profile, None, _EARLIER))
        elif build is not None and (
            compiled := formatting.resources_for(build.resources, span.name)
        ):
            found.append(
                _diagnostic(
                    span.name_range,
                    f"{span.name}: {_resources_text(compiled)}{resources_suffix}",
                    types.DiagnosticSeverity.Hint,
                    "resources",
                )
            )
    return found


def _resources_text(compiled: list[KernelResources]) -> str:
    """One kernel's resource usage; a template's instantiations (or overloads) each on a line
    of their own, as each has its own registers, shared memory and occupancy."""
    if len(compiled) == 1:
        return formatting.resources_line(compiled[0])
    return f"compiled as {len(compiled)} kernels" + "".join(
        f"\n{formatting.compiled_signature(entry)}: {formatting.resources_line(entry)}"
        for entry in compiled
    )


def untrusted_diagnostic(message: str, kernels: tuple[KernelSpan, ...]) -> types.Diagnostic:
    """On the first kernel's name (the top of a file without kernels), not on a comment."""
    top = types.Range(types.Position(0, 0), types.Position(0, 0))
    rng = kernels[0].name_range if kernels else top
    return _diagnostic(rng, message, types.DiagnosticSeverity.Information, "setup")


def _file_anchor(context: FileContext) -> types.Range:
    """Where a message about the whole file goes: the first kernel's name, which is what it is
    about, rather than the file's first line (often a comment); line 1 without kernels."""
    return context.kernels[0].name_range if context.kernels else line_range(context.lines, 0)


def _diagnostic(
    rng: types.Range,
    message: str,
    severity: types.DiagnosticSeverity,
    code: str | None,
    related: list[types.DiagnosticRelatedInformation] | None = None,
    data: dict | None = None,
) -> types.Diagnostic:
    return types.Diagnostic(
        range=rng,
        message=message,
        severity=severity,
        code=code,
        source=SOURCE,
        related_information=related,
        data=data,
    )


def _build_diagnostic(item: SourceDiagnostic, context: FileContext) -> types.Diagnostic:
    severity = _SEVERITY[item.severity]
    related = None
    if same_source(item.file, context.path):
        rng = line_range(context.lines, item.line - 1, max(item.column - 1, 0))
        message = item.message
        if item.reported_at is not None:  # in a header, at the #include that leads there
            related = [_reported_at(item.reported_at)]
    else:  # another file nothing in this one was found to lead to: shown at the top
        rng = line_range(context.lines, 0)
        message = f"{item.file}:{item.line}: {item.message}"
    if item.fix:  # the build_failed error that says it too is not shown beside it
        message += f"\n{item.fix}"
    return _diagnostic(rng, message, severity, item.code, related)


def _reported_at(where: SourcePosition) -> types.DiagnosticRelatedInformation:
    """The header's own position, which the editor links to (the message names it too, for
    clients without relatedInformation)."""
    position = types.Position(where.line - 1, max(where.column - 1, 0))
    return types.DiagnosticRelatedInformation(
        location=types.Location(
            uri=path_to_uri(Path(where.file)), range=types.Range(position, position)
        ),
        message="reported here",
    )


def _errors(result: FileResult) -> list[HarnessError]:
    response = result.response
    build = response.build
    # A failed build's nvcc messages already say why; its error matters only without them.
    explained = build is not None and any(d.severity == "error" for d in build.diagnostics)
    candidates = [response.error, build.error if build is not None else None]
    unique: list[HarnessError] = []
    for error in candidates:
        if error is None or error.kind == "cancelled":
            continue
        if explained and error.kind == "build_failed":
            continue
        if not any((e.kind, e.message) == (error.kind, error.message) for e in unique):
            unique.append(error)
    return unique


def _error_diagnostics(result: FileResult, context: FileContext) -> list[types.Diagnostic]:
    found = []
    for error in _errors(result):
        span = by_name(context.kernels, error.kernel) if error.kernel else None
        rng = span.name_range if span else _file_anchor(context)
        message = f"{error.message} — {error.fix}" if error.fix else error.message
        if error.kind in EXPECTED_ERROR_KINDS:
            severity = types.DiagnosticSeverity.Information
        elif error.kind in SETUP_ERROR_KINDS:
            severity = types.DiagnosticSeverity.Warning
        else:
            severity = types.DiagnosticSeverity.Error
        code = "setup" if error.kind in SETUP_ERROR_KINDS else "run"
        found.append(_diagnostic(rng, message, severity, code, data={"kind": error.kind}))
    return found


def _verify_diagnostics(check: CheckResult | None, context: FileContext) -> list[types.Diagnostic]:
    """An error for a failed verification and each hack behind it; a warning for each pattern
    or weak reference it noticed, which never fails it on its own."""
    if check is None or check.verify is None:
        return []
    verify = check.verify
    # Verification judges the target's outputs, not one kernel: pin it to the first kernel.
    anchor = _file_anchor(context)
    found = []
    if not verify.ok:
        message = verify.message or "the output does not match the reference"
        found.append(_diagnostic(anchor, message, types.DiagnosticSeverity.Error, "verify"))
    notes: list[tuple[HackFinding | VerifyWarning, types.DiagnosticSeverity]] = [
        (hack, types.DiagnosticSeverity.Error) for hack in verify.hacks
    ]
    notes += [(warning, types.DiagnosticSeverity.Warning) for warning in verify.warnings]
    for note, severity in notes:
        rng = line_range(context.lines, note.line - 1) if note.line else anchor
        found.append(_diagnostic(rng, note.message, severity, "verify", data={"kind": note.kind}))
    return found


def _timing_diagnostics(
    check: CheckResult | None, context: FileContext, delta: SaveDelta | None
) -> list[types.Diagnostic]:
    """The verified timing, with the speedups over PyTorch once they are measured and the change
    since the previous save and since the file was opened; shown as soon as the kernel is
    timed, before its profile. A regression is a warning."""
    if check is None or check.timing is None or (check.verify is not None and not check.verify.ok):
        return []
    anchor = _file_anchor(context)
    message = formatting.timing_line(check, delta)
    regression = delta is not None and delta.regression
    severity = (
        types.DiagnosticSeverity.Warning if regression else types.DiagnosticSeverity.Information
    )
    return [_diagnostic(anchor, message, severity, "timing")]


def _state_diagnostic(
    span: KernelSpan,
    state: PerfState,
    profile: KernelProfile | None,
    check: CheckResult | None,
    suffix: str,
) -> types.Diagnostic:
    measured = [
        m for m in (formatting.ncu_duration(profile), formatting.versus_references(check)) if m
    ]
    message = f"{span.name}: {state.summary}"
    if measured:
        message += " — " + ", ".join(measured)
    return _diagnostic(
        span.name_range,
        message + suffix,
        types.DiagnosticSeverity.Information,
        "state",
        data={"kernel": span.name, "state": state.state},
    )


def _line_diagnostics(
    span: KernelSpan, state: PerfState, profile: KernelProfile | None, context: FileContext
) -> list[types.Diagnostic]:
    related = [
        types.DiagnosticRelatedInformation(
            location=types.Location(uri=context.uri, range=span.name_range),
            message=f"in kernel {span.name}",
        )
    ]
    found = []
    blamed: set[int] = set()
    for finding in state.findings:
        if not finding.lines:
            continue
        # One entry per finding, at its first line; its other lines are related to it.
        first, *others = finding.lines
        blamed.update(finding.lines)
        also = [
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=context.uri, range=line_range(context.lines, line - 1)),
                message=f"also line {line}",
            )
            for line in others
        ]
        found.append(
            _diagnostic(
                line_range(context.lines, first - 1),
                _finding_message(finding),
                severity_for_gain(finding.estimated_speedup),
                finding.id,
                related + also,
            )
        )
    # ncu markers the classifier did not turn into findings still point at a line.
    for marker in profile.markers if profile else []:
        if marker.line in blamed or not same_source(marker.file, context.path):
            continue
        blamed.add(marker.line)
        severity = (
            types.DiagnosticSeverity.Information
            if marker.kind in ("warning", "optimization")
            else types.DiagnosticSeverity.Hint
        )
        found.append(
            _diagnostic(
                line_range(context.lines, marker.line - 1),
                marker.message,
                severity,
                marker.rule,
                related,
            )
        )
    return found


def _finding_message(finding: Finding) -> str:
    message = finding.message or finding.id.replace("_", " ")
    if finding.estimated_speedup is not None:
        message += f" ({formatting.ncu_estimate(finding.estimated_speedup)})"
    return message
