"""A code lens above each kernel (`textDocument/codeLens`, resolved lazily in `codeLens/resolve`):
its summary (time per call, or ncu's kernel duration before a timing; the state's head; the
headroom to the roof that limits that state), which opens the kernel's profile view, and
"Optimize". Two short items, so that the line fits an editor split beside the profile view; what
each figure is, is in the summary's tooltip and the hover, and the profile view opens the report
in Nsight Compute. The lenses' places come from the text alone; their titles from the cached
result, only when the client shows them.

The summary opens the editor extension's own profile view when it says it has one
(`clientCommands` in the initialization options, as rust-analyzer's clients declare theirs); any
other client (Neovim) gets the server's command, which answers with a message."""

from __future__ import annotations

from typing import Literal

import msgspec
from lsprotocol import types

from kernelblaster.harness.protocol.records import KernelProfile
from kernelblaster.server.editor.kernel_locator import KernelSpan
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.views import formatting
from kernelblaster.server.views.code_actions import OPTIMIZE
from kernelblaster.server.views.headroom import limiting_roof

# The extension's command (client-vscode/src/commands.ts), used when the client declares it.
SHOW_PROFILE_CLIENT = "kernelblaster.showProfile"
# The server's: the profile view's data and the kept report (profile_view.py); with
# `"show": true` they also say it in a message, for clients without the extension's commands.
KERNEL_PROFILE = "kernelblaster.kernelProfile"
NCU_REPORT = "kernelblaster.ncuReport"

LensKind = Literal["summary", "optimize"]
KINDS: tuple[LensKind, ...] = ("summary", "optimize")


class LensData(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a lens carries from `codeLens` to `codeLens/resolve`."""

    uri: str
    kernel: str
    kind: LensKind
    version: int


def kernel_lenses(uri: str, version: int, spans: tuple[KernelSpan, ...]) -> list[types.CodeLens]:
    """Unresolved lenses on each kernel's name (ranges in Python characters)."""
    lenses = []
    seen: set[str] = set()
    for span in spans:
        if span.name in seen:  # an overload or a second definition: one set of lenses
            continue
        seen.add(span.name)
        for kind in KINDS:
            data = LensData(uri=uri, kernel=span.name, kind=kind, version=version)
            lenses.append(types.CodeLens(range=span.name_range, data=msgspec.to_builtins(data)))
    return lenses


def parse(data: object) -> LensData | None:
    try:
        return msgspec.convert(data, LensData)
    except msgspec.ValidationError:
        return None


def resolve(
    data: LensData,
    result: FileResult | None,
    *,
    current: bool,
    client_commands: frozenset[str],
) -> types.Command:
    """The lens's command: its title from `result` (None: not profiled yet); `current`: the
    result is of the document's text."""
    target = {"uri": data.uri, "kernel": data.kernel}
    if data.kind == "optimize":
        arguments = [{**target, "technique": None, "version": data.version}]
        return types.Command(title="Optimize", command=OPTIMIZE, arguments=arguments)
    title = summary(data.kernel, result, current=current)
    if result is None:  # nothing to show yet: a label
        return types.Command(title=title, command="")
    tooltip = f"{details(data.kernel, result)}\nClick for the profile view."
    if SHOW_PROFILE_CLIENT in client_commands:
        return types.Command(
            title=title, command=SHOW_PROFILE_CLIENT, arguments=[target], tooltip=tooltip
        )
    arguments = [{**target, "show": True}]
    return types.Command(title=title, command=KERNEL_PROFILE, arguments=arguments, tooltip=tooltip)


def summary(kernel: str, result: FileResult | None, *, current: bool) -> str:
    """ "1.50 ms/call · launch-bound · grid 2% of a wave" """
    if result is None:
        return "not profiled yet: save to build, check and profile"
    response = result.response
    parts = []
    profile = _profile(result, kernel)
    # The time per call is the whole target's: a kernel's own only when it is the file's one.
    per_call = formatting.per_call(response.check) if len(result.states) <= 1 else None
    if per_call is not None:
        parts.append(per_call.replace(" per call", "/call"))
    elif (kernel_time := formatting.kernel_time(profile)) is not None:
        parts.append(f"ncu {kernel_time}")
    state = result.states.get(kernel)
    if state is not None:  # its head ("memory-bound"): the whole line is the tooltip and hover's
        parts.append(state.summary.split(" (", 1)[0].split(";", 1)[0])
        parts.append(limiting_roof(state, profile).short)
    if not parts:
        return "no timing or profile yet"
    line = " · ".join(parts)
    return line if current else f"{line} (earlier version)"


def details(kernel: str, result: FileResult) -> str:
    """The summary's figures, each saying what it is: the lens's tooltip."""
    check = result.response.check
    profile = _profile(result, kernel)
    lines = []
    if check is not None and check.timing is not None:
        lines.append(formatting.timing_line(check))
    if (duration := formatting.ncu_duration(profile)) is not None:
        lines.append(f"{duration} (one profiled launch)")
    state = result.states.get(kernel)
    if state is not None:
        lines += [state.summary, limiting_roof(state, profile).line]
    return "\n".join(lines) or "No timing or profile yet."


def _profile(result: FileResult, kernel: str) -> KernelProfile | None:
    profile = result.response.profile
    return formatting.profile_for(profile.kernels, kernel) if profile else None
