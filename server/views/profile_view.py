"""What the profile view of one kernel shows (`kernelblaster.kernelProfile`), and where its kept
Nsight Compute report is (`kernelblaster.ncuReport`): the kernel's state and findings, the lines
ncu blames with their text, its point on the roofline under the GPU's roofs, and the points of
its earlier saves from the timing history. Pure: built from the cached result, the history and
the document's lines; the editor draws it (client-vscode/src/profileViewHtml.ts)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from kernelblaster.harness.analysis import roofline
from kernelblaster.harness.analysis.roofline import RooflinePoint, Roofs
from kernelblaster.harness.protocol.records import KernelProfile, PerfState
from kernelblaster.server.editor.documents import same_source
from kernelblaster.server.results.cache import FileResult
from kernelblaster.server.results.history import HistoryPoint, SaveDelta
from kernelblaster.server.views import formatting
from kernelblaster.server.views.headroom import limiting_roof

NCU_UI = "ncu-ui"
NCU_DOWNLOAD = "https://developer.nvidia.com/nsight-compute"


class ProfileArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uri: str
    kernel: str | None = None
    show: bool = False  # also say it in a message (clients without the profile view)


class BlamedLine(msgspec.Struct, kw_only=True):
    line: int  # 1-based
    text: str  # the line as the document has it now
    message: str
    rule: str  # the finding's id or ncu's rule
    estimated_speedup: float | None = None  # percent, as ncu estimates it


class VersionPoint(msgspec.Struct, kw_only=True):
    """The kernel at one save of the history."""

    time: float
    median_ms: float  # the whole target
    duration_ms: float | None = None  # the kernel under ncu
    state: str | None = None
    flops_per_s: float | None = None
    dram_bytes_per_s: float | None = None
    l1_bytes_per_s: float | None = None
    l2_bytes_per_s: float | None = None
    current: bool = False  # the save the view's profile is of


class KernelProfileView(msgspec.Struct, kw_only=True):
    uri: str
    kernel: str
    device: str | None = None
    arch: str | None = None
    profiled: bool  # a profile of this kernel exists
    current: bool  # ... and it is of the document's text
    state: PerfState | None = None
    limit: str | None = None  # the headroom to the roof that limits the state (headroom.py)
    duration_ms: float | None = None
    median_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    change: str | None = None  # "1.32× faster than the previous save, ..."
    roofs: Roofs | None = None
    point: RooflinePoint | None = None
    history: list[VersionPoint] = []
    blamed: list[BlamedLine] = []
    report: str | None = None  # the kept .ncu-rep, for Nsight Compute
    message: str = ""  # why something is missing, in words


class NcuReport(msgspec.Struct, kw_only=True):
    """`kernelblaster.ncuReport`'s answer: the newest kept report, or why there is none, and how
    to open it."""

    path: str | None
    message: str


def kernel_profile(
    uri: str,
    kernel: str,
    result: FileResult | None,
    *,
    lines: list[str],
    text_hash: str,
    delta: SaveDelta | None,
    history: list[HistoryPoint],
    report: Path | None,
) -> KernelProfileView:
    view = KernelProfileView(uri=uri, kernel=kernel, profiled=False, current=False)
    view.report = str(report) if report else None
    view.history = _versions(kernel, history, result)
    if result is None:
        view.message = "Not profiled yet: save the file to build, check and profile it."
        return view
    response = result.response
    check = response.check
    if check is not None and check.timing is not None:
        view.median_ms = check.timing.median_ms
        view.speedup_vs_eager = check.speedup_vs_eager
        view.speedup_vs_compile = check.speedup_vs_compile
    view.change = formatting.delta_line(delta) if delta is not None else None
    profile = response.profile
    kernel_profile = _longest(profile.kernels, kernel) if profile else None
    if profile is None or kernel_profile is None:
        view.message = f"No profile of {kernel} yet: the last run did not profile it."
        return view
    view.profiled = True
    view.current = result.profiled_text_hash == text_hash
    view.device, view.arch = profile.device, profile.arch
    view.state = result.states.get(kernel)
    view.limit = limiting_roof(view.state, kernel_profile).line if view.state else None
    if kernel_profile.duration_ns is not None:
        view.duration_ms = kernel_profile.duration_ns / 1e6
    view.point = roofline.point(kernel_profile)
    view.roofs = roofline.roofs(kernel_profile, profile.device)
    if view.roofs is None:
        view.message = (
            f"No roofs for the {profile.device or 'unknown GPU'}: the profile did not measure "
            "its peaks and its published ones are not known here; profile at full depth."
        )
    elif view.point is None:
        view.message = (
            "This profile has no FLOP and DRAM-traffic counts (a quick or in-process pass): "
            "profile at full depth (KernelBlaster: Profile File) to place the kernel."
        )
    if view.current:
        view.blamed = _blamed(view.state, kernel_profile, lines, Path(result.source))
    return view


def ncu_report(path: Path | None, source: Path) -> NcuReport:
    if path is None:
        return NcuReport(
            path=None,
            message=f"No Nsight Compute report of {source.name} is kept yet: it is kept after "
            "an ncu profile (save on a GPU machine, or run KernelBlaster: Profile File).",
        )
    return NcuReport(
        path=str(path),
        message=f"The Nsight Compute report of {source.name} is {path}. Open it in Nsight "
        f"Compute's UI with `{NCU_UI} {path}`; the UI comes with the CUDA toolkit and from "
        f"{NCU_DOWNLOAD}.",
    )


def profile_text(view: KernelProfileView) -> str:
    """The view in one message, for clients without the webview."""
    if not view.profiled:
        return f"{view.kernel}: {view.message}"
    parts = [f"{view.kernel} on {view.device}"]
    if view.duration_ms is not None:
        parts.append(formatting.milliseconds(view.duration_ms))
    if view.state is not None:
        parts.append(view.state.summary)
    if view.point is not None and view.roofs is not None:
        point, roofs = view.point, view.roofs
        tensor = (
            f" ({point.tensor_flops_per_s / 1e12:.3g} on the tensor cores)"
            if point.tensor_flops_per_s > 0
            else ""
        )
        tensor_roofs = "".join(
            f"{roof.flops_per_s / 1e12:.3g} TFLOP/s {roof.path} tensor, " for roof in roofs.tensor
        )
        traffic = _levels(point.l1_bytes_per_s, point.l2_bytes_per_s, point.dram_bytes_per_s)
        bandwidths = _levels(roofs.l1_bytes_per_s, roofs.l2_bytes_per_s, roofs.dram_bytes_per_s)
        parts.append(
            f"{point.flops_per_s / 1e12:.3g} TFLOP/s{tensor} moving {traffic} "
            f"(roofs {tensor_roofs}{roofs.fp32_flops_per_s / 1e12:.3g} TFLOP/s FP32, "
            f"{bandwidths}, {roofs.source})"
        )
    if view.change:
        parts.append(view.change)
    parts += [f"line {b.line}: {b.message}" for b in view.blamed]
    return "; ".join(parts)


def _levels(l1: float | None, l2: float | None, dram: float) -> str:
    """Bytes per second through each memory level known: "2.45 TB/s L1, 542 GB/s DRAM"."""
    levels = [("L1", l1), ("L2", l2), ("DRAM", dram)]
    return ", ".join(f"{_bandwidth(value)} {name}" for name, value in levels if value is not None)


def _bandwidth(bytes_per_s: float) -> str:
    if bytes_per_s >= 1e12:
        return f"{bytes_per_s / 1e12:.3g} TB/s"
    return f"{bytes_per_s / 1e9:.3g} GB/s"


def _longest(kernels: list[KernelProfile], name: str) -> KernelProfile | None:
    """The kernel's longest launch (its state's, as in classify.kernel_states)."""
    launches = [k for k in kernels if k.name == name]
    return max(launches, key=lambda k: k.duration_ns or 0.0) if launches else None


def _versions(
    kernel: str, history: list[HistoryPoint], result: FileResult | None
) -> list[VersionPoint]:
    versions = []
    for point in history:
        at = point.kernels.get(kernel)
        versions.append(
            VersionPoint(
                time=point.time,
                median_ms=point.median_ms,
                duration_ms=at.duration_ms if at else None,
                state=at.state if at else None,
                flops_per_s=at.flops_per_s if at else None,
                dram_bytes_per_s=at.dram_bytes_per_s if at else None,
                l1_bytes_per_s=at.l1_bytes_per_s if at else None,
                l2_bytes_per_s=at.l2_bytes_per_s if at else None,
                current=result is not None and point.text_hash == result.profiled_text_hash,
            )
        )
    return versions


def _blamed(
    state: PerfState | None, profile: KernelProfile, lines: list[str], source: Path
) -> list[BlamedLine]:
    found: dict[int, BlamedLine] = {}

    def text(line: int) -> str:
        return lines[line - 1].rstrip("\n") if 0 < line <= len(lines) else ""

    for finding in state.findings if state else []:
        for line in finding.lines:
            found.setdefault(
                line,
                BlamedLine(
                    line=line,
                    text=text(line),
                    message=finding.message or finding.id.replace("_", " "),
                    rule=finding.id,
                    estimated_speedup=finding.estimated_speedup,
                ),
            )
    for marker in profile.markers:
        if marker.line not in found and same_source(marker.file, source):
            found[marker.line] = BlamedLine(
                line=marker.line, text=text(marker.line), message=marker.message, rule=marker.rule
            )
    return [found[line] for line in sorted(found)]
