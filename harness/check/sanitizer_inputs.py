"""Which input set compute-sanitizer runs a kernel on: its tools slow every access, so KernelBench's
get_inputs() runs with a smaller `batch_size` where that is the same work with fewer rows, else
as written (the result says why). A finding on the smaller set is confirmed at the full size
before it counts. Worker side: imports torch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import torch

from kernelblaster.harness.analysis.cuda_source import read_source
from kernelblaster.harness.analysis.reference_source import (
    BATCH_SIZE,
    batch_size_of,
    with_batch_size,
)
from kernelblaster.harness.analysis.static_checks import strip_comments
from kernelblaster.harness.target.reference import load_module
from kernelblaster.harness.target.targets import CALLED_KINDS, Target

SCALED_ROWS = 32  # a warp's rows, and the usual row tile's
INDEX_LIMIT = 2**31  # elements: where a 32-bit index overflows


class SanitizerInputs(NamedTuple):
    batch_size: int | None  # get_inputs() at this batch_size; None: as written
    described: str  # which inputs, said for the result


def sanitizer_inputs(target: Target) -> SanitizerInputs:
    """The input set compute-sanitizer checks `target` on, and why that one."""
    if target.kind not in CALLED_KINDS or not target.reference:
        return SanitizerInputs(None, "the program's own run")
    path = Path(target.reference)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # the run itself then says what is wrong
        return _as_written(f"{path.name} can't be read: {exc}")
    batch = batch_size_of(text)
    if batch is None:
        return _as_written(f"{path.name} sets no top-level `batch_size = <int>` to scale")
    if batch < 2 * SCALED_ROWS:
        return _as_written(f"batch_size {batch} is small already")
    # the same remainder, so a last partial warp or row tile of the full size is there too
    scaled = SCALED_ROWS + batch % SCALED_ROWS
    code = read_source(Path(target.source))
    if target.kind != "kernelbench":  # CUDA: what a comment says is no indexing
        code = strip_comments(code)
    if re.search(rf"(?<![\w.]){batch}(?![\w.])", code):
        return _as_written(
            f"batch_size {batch}: the kernel's source names {batch}, so its indexing may "
            "depend on that very size"
        )
    copy = with_batch_size(text, scaled)
    assert copy is not None  # batch_size_of found the assignment
    why_not = _why_not_scaled(path, text, copy, batch)
    if why_not is not None:
        return _as_written(f"batch_size {batch}: {why_not}")
    return SanitizerInputs(scaled, f"get_inputs() at batch_size {scaled} instead of {batch}")


def _as_written(why: str) -> SanitizerInputs:
    return SanitizerInputs(None, f"get_inputs() as written ({why})")


def _why_not_scaled(path: Path, text: str, copy: str, batch: int) -> str | None:
    """Why the copy of the reference at another batch size is not the same work with fewer
    rows, or None when it is (measured on the meta device: nothing is allocated)."""
    key = abs(hash(str(path)))
    try:
        full = load_module(path, f"kernelblaster_sanitizer_full_{key}", text)
        scaled = load_module(path, f"kernelblaster_sanitizer_scaled_{key}", copy)
        init = list(full.get_init_inputs())
        if not _same(init, list(scaled.get_init_inputs())):
            return "get_init_inputs() depends on it"
        torch.manual_seed(0)
        with torch.device("meta"), torch.no_grad():
            if getattr(full.Model(*init), BATCH_SIZE, None) is not None:
                return "Model keeps it, so a launcher would receive the full size"
            full_inputs = [x for x in full.get_inputs() if isinstance(x, torch.Tensor)]
            scaled_inputs = [x for x in scaled.get_inputs() if isinstance(x, torch.Tensor)]
    except Exception as exc:  # noqa: BLE001 - the reference's own code: sized as written
        return f"get_inputs() can't be sized without running it ({type(exc).__name__})"
    if [x.shape for x in full_inputs] == [x.shape for x in scaled_inputs]:
        return "get_inputs() does not use it"
    if any(x.numel() >= INDEX_LIMIT for x in full_inputs):
        return "an input has 2**31 elements or more (32-bit index overflow shows only there)"
    return None


def _same(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            same = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
            if not (same and x.shape == y.shape and torch.equal(x.cpu(), y.cpu())):
                return False
        elif x != y:
            return False
    return True
