"""A code lens above each kernel (`textDocument/codeLens`, resolved lazily in `codeLens/resolve`):
a one-line summary (time, the state's head, speedup against the better of PyTorch eager and
torch.compile, headroom to the nearest roof) and the actions "Optimize", "Show profile" and
"Open in Nsight Compute". The lenses' places come from the text alone; their titles from the
cached result, only when the client shows them.

"Show profile" and "Open in Nsight Compute" are the editor extension's own commands when it
says it has them (`clientCommands` in the initialization options, as rust-analyzer's clients
declare theirs); any other client (Neovim) gets the server's commands, which answer with a
message."""

from __future__ import annotations

from typing import Literal

import msgspec
from lsprotocol import types

from kernelblaster.harness.protocol.records import Headroom
from kernelblaster.server.editor.kernel_locator import KernelSpan
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.views import formatting
from kernelblaster.server.views.code_actions import OPTIMIZE

# The extension's commands (client-vscode/src/commands.ts), used when the client declares them.
SHOW_PROFILE_CLIENT = "kernelblaster.showProfile"
OPEN_IN_NCU_CLIENT = "kernelblaster.openInNsightCompute"
# The server's: the profile view's data and the kept report (profile_view.py); with
# `"show": true` they also say it in a message, for clients without the extension's commands.
KERNEL_PROFILE = "kernelblaster.kernelProfile"
NCU_REPORT = "kernelblaster.ncuReport"

LensKind = Literal["summary", "optimize", "profile", "ncu"]
KINDS: tuple[LensKind, ...] = ("summary", "optimize", "profile", "ncu")
_ROOF_WORDS = {
    "dram_bandwidth": "DRAM bandwidth",
    "fp32": "FP32",
    "fp16_tensor": "FP16 tensor",
    "fp64": "FP64",
    "sm_throughput": "SM throughput",
}


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
    has_report: bool,
    client_commands: frozenset[str],
) -> types.Command:
    """The lens's command: its title from `result` (None: not profiled yet); `current`: the
    result is of the document's text."""
    target = {"uri": data.uri, "kernel": data.kernel}
    if data.kind == "summary":
        state = result.states.get(data.kernel) if result else None
        return types.Command(
            title=summary(data.kernel, result, current=current),
            command="",
            tooltip=state.summary if state else None,  # the whole state line
        )
    if data.kind == "optimize":
        arguments = [{**target, "technique": None, "version": data.version}]
        return types.Command(title="Optimize", command=OPTIMIZE, arguments=arguments)
    if data.kind == "profile":
        if SHOW_PROFILE_CLIENT in client_commands:
            return types.Command(
                title="Show profile", command=SHOW_PROFILE_CLIENT, arguments=[target]
            )
        arguments = [{**target, "show": True}]
        return types.Command(title="Show profile", command=KERNEL_PROFILE, arguments=arguments)
    title = "Open in Nsight Compute" if has_report else "Nsight Compute: no report yet"
    if OPEN_IN_NCU_CLIENT in client_commands:
        return types.Command(title=title, command=OPEN_IN_NCU_CLIENT, arguments=[target])
    return types.Command(title=title, command=NCU_REPORT, arguments=[{**target, "show": True}])


def summary(kernel: str, result: FileResult | None, *, current: bool) -> str:
    """ "0.177 ms · memory-bound · 0.48× vs best of eager/torch.compile · 35% of the DRAM
    bandwidth roof" """
    if result is None:
        return "not profiled yet: save to build, check and profile"
    response = result.response
    parts = []
    profile = formatting.profile_for(response.profile.kernels, kernel) if response.profile else None
    if (kernel_time := formatting.kernel_time(profile)) is not None:
        parts.append(kernel_time)
    elif response.check is not None and response.check.timing is not None:
        parts.append(f"{formatting.milliseconds(response.check.timing.median_ms)} per call")
    state = result.states.get(kernel)
    if state is not None:  # its head ("memory-bound"): the whole line is the tooltip and hover's
        parts.append(state.summary.split(" (", 1)[0].split(";", 1)[0])
    if (best := best_reference_ratio(result)) is not None:
        parts.append(f"{formatting.factor(best)} vs best of eager/torch.compile")
    if state is not None and state.headroom is not None:
        parts.append(headroom_text(state.headroom))
    if not parts:
        return "no timing or profile yet"
    line = " · ".join(parts)
    return line if current else f"{line} (earlier version)"


def best_reference_ratio(result: FileResult) -> float | None:
    """The kernel's speedup over the faster of PyTorch eager and torch.compile."""
    check = result.response.check
    if check is None:
        return None
    ratios = [r for r in (check.speedup_vs_eager, check.speedup_vs_compile) if r is not None]
    return min(ratios) if ratios else None


def headroom_text(headroom: Headroom) -> str:
    if headroom.roof == "none":
        return "no roof measured"
    words = _ROOF_WORDS[headroom.roof]
    return f"{headroom.achieved_fraction:.0%} of the {words} roof"
