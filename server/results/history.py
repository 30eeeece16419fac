"""Each file's timing history, one point per verified save (median time, spread, and per kernel
ncu's time, state, headroom and roofline point), and the deltas the editor shows ("1.32× faster
than the previous save"). A history holds one GPU and one reference: times on another GPU or
against a changed reference are not comparable and start a new one. The last profiles'
`.ncu-rep` files are kept beside it (kept_reports.py)."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from kernelblaster.atomic_files import write_atomically
from kernelblaster.folders import BESIDE_FIX, made_folder
from kernelblaster.harness.analysis import roofline
from kernelblaster.harness.protocol.records import CheckResult, KernelProfile, Timing
from kernelblaster.harness.target.pairing import reference_beside
from kernelblaster.server.results import kept_reports
from kernelblaster.server.results.cache import FileResult, ResultCache
from kernelblaster.settings import Settings

log = logging.getLogger(__name__)

FORMAT = 1
MAX_POINTS = 200  # per file; the oldest go first
NO_REFERENCE = "none"


class KernelPoint(msgspec.Struct, kw_only=True):
    """One kernel at one save, from that save's own profile."""

    duration_ms: float | None = None  # ncu's gpu__time_duration
    state: str | None = None
    summary: str | None = None
    headroom_roof: str | None = None
    headroom_fraction: float | None = None
    flops_per_s: float | None = None  # the roofline point
    dram_bytes_per_s: float | None = None
    l1_bytes_per_s: float | None = None  # ... on the hierarchical roofline
    l2_bytes_per_s: float | None = None


class HistoryPoint(msgspec.Struct, kw_only=True):
    time: float  # epoch seconds
    text_hash: str
    median_ms: float  # the whole target, as the timing diagnostic shows it
    p20_ms: float
    p80_ms: float
    kernels: dict[str, KernelPoint] = {}
    report: str | None = None  # the kept .ncu-rep of this save's profile


class TimingHistory(msgspec.Struct, kw_only=True):
    format: int = FORMAT
    source: str
    gpu: str
    reference_hash: str
    points: list[HistoryPoint] = []


@dataclass(frozen=True)
class Change:
    """`now` against an earlier point: `factor` > 1 is faster (earlier time / this time)."""

    factor: float
    within_noise: bool  # the two runs' 20th-80th percentile ranges overlap


@dataclass(frozen=True)
class SaveDelta:
    median_ms: float
    previous: Change | None  # against the last save of other text
    since_opened: Change | None  # against the point the session opened with

    @property
    def regression(self) -> bool:
        return (
            self.previous is not None
            and self.previous.factor < 1
            and not (self.previous.within_noise)
        )


_decoder = msgspec.json.Decoder(TimingHistory)


def reference_hash(source: Path, settings: Settings) -> str:
    """The identity of `source`'s reference: a hash of its content (blocking file I/O)."""
    reference = reference_beside(source)
    for target in settings.targets:
        if target.reference and Path(target.source).name == source.name:
            reference = (source.parent / target.reference).resolve()
    try:
        return hashlib.sha256(reference.read_bytes()).hexdigest()[:16]
    except OSError:
        return NO_REFERENCE


class SaveHistory:
    """The timing histories of the open files, in memory and beside the results cache."""

    def __init__(self, cache: ResultCache) -> None:
        self._cache = cache
        self._memory: dict[Path, TimingHistory] = {}
        self._opened: dict[Path, HistoryPoint | None] = {}
        self._reference: dict[Path, str] = {}

    def file_for(self, source: Path) -> Path:
        results = self._cache.file_for(source)
        return results.with_name(f"{results.stem}.history.json")

    def reports_dir(self, source: Path) -> Path:
        results = self._cache.file_for(source)
        return results.with_name(f"{results.stem}.reports")

    def open(self, source: Path, settings: Settings) -> None:
        """Load the file's history and take its last point as the session's start (blocking)."""
        history = self._load(source)
        self._reference[source] = reference_hash(source, settings)
        if history is not None and history.reference_hash == self._reference[source]:
            self._opened[source] = history.points[-1] if history.points else None
        else:
            self._opened[source] = None

    def close(self, source: Path) -> None:
        self._memory.pop(source, None)
        self._opened.pop(source, None)
        self._reference.pop(source, None)

    def note_reference(self, source: Path, settings: Settings) -> None:
        """Re-read the reference's identity before a run (blocking)."""
        self._reference[source] = reference_hash(source, settings)

    def history(self, source: Path) -> TimingHistory | None:
        return self._memory.get(source)

    def record(self, result: FileResult) -> HistoryPoint | None:
        """Add `result`'s verified timing (and its own profile) to the history, starting a new
        history on another GPU or reference; keep its report. Blocking file I/O."""
        source = Path(result.source)
        check = result.response.check
        if not _verified_timing(check):
            return None
        assert check is not None and check.timing is not None
        gpu = check.gpu or ""
        reference = self._reference.get(source, NO_REFERENCE)
        history = self._memory.get(source) or self._load(source)
        if history is None or (history.gpu, history.reference_hash) != (gpu, reference):
            history = TimingHistory(source=str(source), gpu=gpu, reference_hash=reference)
            self._opened[source] = None
        point = _point(result, check.timing)
        profile = result.response.profile
        # This save's own ncu report (not an earlier version's, not in-process counters').
        if (
            profile is not None
            and profile.report_path
            and result.profile_hash is None
            and profile.program != "in_process"
        ):
            point.report = kept_reports.keep(
                Path(profile.report_path), self.reports_dir(source), result.text_hash
            )
        if history.points and history.points[-1].text_hash == point.text_hash:
            history.points[-1] = point  # the same text measured again
        else:
            history.points.append(point)
        del history.points[:-MAX_POINTS]
        self._memory[source] = history
        if self._opened.get(source) is None:
            self._opened[source] = point
        self._save(history)
        return point

    def delta(self, source: Path, check: CheckResult | None, text_hash: str) -> SaveDelta | None:
        """How the timing of `check` (of the text hashed `text_hash`) compares with the
        previous save and with the session's start, where they are comparable."""
        history = self._memory.get(source)
        if history is None or not _verified_timing(check):
            return None
        assert check is not None and check.timing is not None
        comparable = (history.gpu, history.reference_hash) == (
            check.gpu or "",
            self._reference.get(source, NO_REFERENCE),
        )
        if not comparable:
            return SaveDelta(check.timing.median_ms, None, None)
        earlier = [p for p in history.points if p.text_hash != text_hash]
        opened = self._opened.get(source)
        return SaveDelta(
            median_ms=check.timing.median_ms,
            previous=_change(earlier[-1], check.timing) if earlier else None,
            since_opened=(
                _change(opened, check.timing)
                if opened is not None and opened.text_hash != text_hash
                else None
            ),
        )

    def latest_report(self, source: Path) -> Path | None:
        """The newest kept report of the file that still exists."""
        history = self._memory.get(source)
        for point in reversed(history.points if history else []):
            if point.report and Path(point.report).is_file():
                return Path(point.report)
        return None

    def _load(self, source: Path) -> TimingHistory | None:
        if source in self._memory:
            return self._memory[source]
        path = self.file_for(source)
        try:
            history = _decoder.decode(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("ignoring unreadable timing history %s: %s", path, exc)
            return None
        if history.format != FORMAT or history.source != str(source):
            return None
        self._memory[source] = history
        return history

    def _save(self, history: TimingHistory) -> None:
        path = self.file_for(Path(history.source))
        try:
            made_folder(path.parent, fix=BESIDE_FIX)
            write_atomically(path, msgspec.json.encode(history).decode())
        except OSError as exc:
            log.warning("could not save the timing history of %s: %s", history.source, exc)


def _verified_timing(check: CheckResult | None) -> bool:
    return (
        check is not None and check.timing is not None and (check.verify is None or check.verify.ok)
    )


def _change(earlier: HistoryPoint, now: Timing) -> Change:
    overlap = earlier.p20_ms <= now.p80_ms and now.p20_ms <= earlier.p80_ms
    return Change(factor=earlier.median_ms / now.median_ms, within_noise=overlap)


def _point(result: FileResult, timing: Timing) -> HistoryPoint:
    point = HistoryPoint(
        time=time.time(),
        text_hash=result.text_hash,
        median_ms=timing.median_ms,
        p20_ms=timing.p20_ms,
        p80_ms=timing.p80_ms,
    )
    profile = result.response.profile
    if profile is None or result.profile_hash is not None:  # an earlier version's profile
        return point
    states = result.states
    longest: dict[str, KernelProfile] = {}  # a kernel launched several times: its longest launch
    for kernel in profile.kernels:  # (the one its state comes from)
        known = longest.get(kernel.name)
        if known is None or (kernel.duration_ns or 0.0) > (known.duration_ns or 0.0):
            longest[kernel.name] = kernel
    for kernel in longest.values():
        state = states.get(kernel.name)
        where = roofline.point(kernel)
        headroom = state.headroom if state is not None else None
        point.kernels[kernel.name] = KernelPoint(
            duration_ms=kernel.duration_ns / 1e6 if kernel.duration_ns is not None else None,
            state=state.state if state else None,
            summary=state.summary if state else None,
            headroom_roof=headroom.roof if headroom else None,
            headroom_fraction=headroom.achieved_fraction if headroom else None,
            flops_per_s=where.flops_per_s if where else None,
            dram_bytes_per_s=where.dram_bytes_per_s if where else None,
            l1_bytes_per_s=where.l1_bytes_per_s if where else None,
            l2_bytes_per_s=where.l2_bytes_per_s if where else None,
        )
    return point
