"""The reference side a spare worker makes before its request exists: the next request is most often
for the same reference (the next save, the next candidate), so a save whose build is cached
starts verifying at once instead of after ~1 s of reference work. The side is used only for the
same path, GPU and trial count with every `.py` of the reference's folder unchanged; else it is
dropped. A side whose making failed is never used. Torch is imported by `make` only."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings

if TYPE_CHECKING:
    from kernelblaster.harness.target.clean_reference import CleanReference
    from kernelblaster.harness.target.reference_side import ReferenceSide

_log = logging.getLogger(__name__)


class ReferenceKey(msgspec.Struct, frozen=True):
    """What a reference side depends on; equal keys, interchangeable sides."""

    reference: str
    gpu: int
    trials: int
    # (name, size, mtime_ns) of each .py file beside the reference, sorted
    modules: tuple[tuple[str, int, int], ...]


def reference_key(target: Target, settings: Settings) -> ReferenceKey | None:
    """The key of `target`'s reference side; None when there is no reference file to key."""
    if not target.reference:
        return None
    path = Path(target.reference).resolve()
    try:
        modules = _module_stamps(path.parent)
    except OSError:  # a file went away while the folder was listed: nothing to key it by
        return None
    return ReferenceKey(
        reference=str(path), gpu=settings.gpu, trials=settings.trials, modules=modules
    )


def _module_stamps(folder: Path) -> tuple[tuple[str, int, int], ...]:
    stamps = []
    for module in folder.glob("*.py"):
        info = module.stat()
        stamps.append((module.name, info.st_size, info.st_mtime_ns))
    return tuple(sorted(stamps))


class ReferenceAhead:
    """The one side a spare makes ahead (`make`, on the prewarm thread) and its request takes
    (`take`, on the request's thread). `take` waits for `make` to finish, or to be over."""

    def __init__(self, started: float | None = None) -> None:
        # The worker's start (perf_counter), from which `mark` times the spare's steps
        self._started = time.perf_counter() if started is None else started
        self._marks: dict[str, float] = {}
        self._key: ReferenceKey | None = None
        self._side: ReferenceSide | None = None
        self._over = threading.Event()  # making it ended, or will never begin
        self._unwanted = threading.Event()  # the request needs another reference: stop
        # The request's key once it came; with _key, read and set under _keys, so that a
        # request for another reference stops the making whichever of the two comes first
        self._requested: ReferenceKey | None = None
        self._keys = threading.Lock()

    def mark(self, step: str) -> None:
        """Note when the spare reached `step`, in seconds since the worker started: a side
        handed out carries them (`ahead_at_<step>`), so a request that waited for it says what
        the spare was doing meanwhile (its imports, the GPU's release, its CUDA context, the
        side's parts)."""
        self._marks[step] = round(time.perf_counter() - self._started, 4)

    def make(
        self,
        target: Target,
        settings: Settings,
        clean: CleanReference,
        *,
        device_name: str | None = None,
    ) -> None:
        """Make `target`'s reference side (its session in `clean`), unless the request came for
        another first or the side and a check beside it would not fit in the GPU's free memory
        (`spare_side_fits`). `device_name`: where memory is measured, default the settings' GPU."""
        try:
            key = reference_key(target, settings)
            with self._keys:
                if key is not None and self._requested not in (None, key):
                    self._unwanted.set()  # the request came first, for another reference
                if key is None or self._unwanted.is_set():
                    return
                self._key = key
            import torch

            from kernelblaster.harness.check import check  # imports torch
            from kernelblaster.harness.target.reference_side import spare_side_fits

            device = torch.device(device_name or f"cuda:{settings.gpu}")
            self.mark("making")
            fits = spare_side_fits(
                Path(key.reference), device, trials=settings.trials, cache=settings.cache_root()
            )
            if not fits:
                _log.info("no reference side made ahead: it would not fit beside a check")
                return
            self.mark("sized")
            self._side = check.prepare_reference(
                target, settings, clean=clean, abandon=self._unwanted.is_set
            )
            self.mark("prepared")
            if self._side.clean is not None:  # its sets handed over here too, while it waits
                self._side.clean.hand_over_ahead(abandon=self._unwanted.is_set)
                self.mark("handed_over")
        finally:
            self._over.set()

    def nothing_to_make(self) -> None:
        """No side will be made (no expected request, no torch or GPU): `take` returns None."""
        self._over.set()

    def unwanted(self) -> None:
        """The request needs no reference side: one being made stops at its next step."""
        self._unwanted.set()

    def drop(self) -> None:
        """Forget a side that was not taken, once making it is over (the worker calls it after
        joining the prewarm): its tensors go back to torch's allocator before the check runs."""
        self._side = None

    def take(self, target: Target, settings: Settings) -> ReferenceSide | None:
        """The side made for `target`'s unchanged reference, or None (the caller makes it).
        A side handed out has its parts' seconds renamed `ahead_<part>` (made before the
        request), and `reference_wait`: how long the request waited for it."""
        wanted = reference_key(target, settings)
        self.mark("requested")
        with self._keys:
            self._requested = wanted
            if self._key is not None and wanted != self._key:
                self._unwanted.set()  # before waiting: a side being made stops at its next step
        began = time.perf_counter()
        self._over.wait()
        side, self._side = self._side, None  # handed out once; dropped when not handed out
        if side is None or wanted is None or wanted != self._key:
            return None
        if side.failure is not None or side.probe is None:
            _log.info("the reference side made ahead failed; made again: %r", side.failure)
            return None
        side.seconds = {f"ahead_{part}": s for part, s in side.seconds.items()}
        side.seconds.update({f"ahead_at_{step}": at for step, at in self._marks.items()})
        side.seconds["reference_wait"] = round(time.perf_counter() - began, 4)
        side.ahead = True
        return side
