"""The last Nsight Compute reports of each file, copied out of the build cache (where the next
profile overwrites them) beside the results cache, for "Open in Nsight Compute". At most
KEEP per file and REPORTS_CAP_BYTES together; the newest is kept even when it alone is over."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from kernelblaster.folders import BESIDE_FIX, made_folder

log = logging.getLogger(__name__)

KEEP = 5
REPORTS_CAP_BYTES = 256 * 1024 * 1024
SUFFIX = ".ncu-rep"


def keep(report: Path, folder: Path, text_hash: str) -> str | None:
    """Copy `report` into `folder` (atomically: a reader never sees half a report) and drop the
    oldest beyond the limits; the kept path, or None when it could not be copied."""
    # Named by the time it was kept, in nanoseconds: the names sort oldest first.
    kept = folder / f"{time.time_ns()}-{text_hash[:12]}{SUFFIX}"
    temporary: str | None = None
    try:
        made_folder(folder, fix=BESIDE_FIX)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
        os.close(fd)
        shutil.copyfile(report, temporary)
        os.replace(temporary, kept)
        temporary = None
    except OSError as exc:
        log.warning("could not keep the Nsight Compute report %s: %s", report, exc)
        return None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    prune(folder)
    return str(kept)


def prune(folder: Path) -> None:
    """Keep the newest KEEP reports within REPORTS_CAP_BYTES (the newest always)."""
    reports = sorted(folder.glob(f"*{SUFFIX}"), key=lambda p: p.name, reverse=True)
    total = 0
    for index, report in enumerate(reports):
        total += report.stat().st_size
        if index > 0 and (index >= KEEP or total > REPORTS_CAP_BYTES):
            with contextlib.suppress(OSError):
                report.unlink()


def is_kept(path: Path, folder: Path) -> bool:
    """Whether `path` is a report kept in `folder` (and nothing else: what a client may open)."""
    try:
        resolved = path.resolve(strict=True)
    except OSError:
        return False
    return resolved.suffix == SUFFIX and resolved.parent == folder.resolve()
