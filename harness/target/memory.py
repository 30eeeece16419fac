"""How much GPU memory a problem needs, and an out-of-memory failure reported as one.
Worker side: imports torch.

At the least, verification holds one input set at a time, twice (the candidate's copy and the
pristine one the reference runs on), and four sets of outputs (what the candidate returned,
what the caller's stream saw, the reference's, and the previous call's, kept so that a reused
buffer can't pass as a new one), besides the reference's parameters and the candidate's own
copy. Where a quarter of the free memory holds them, every trial's sets are made ahead instead
(harness/target/trial_sets.py)."""

from __future__ import annotations

import gc
import traceback

import psutil
import torch

from kernelblaster.harness.protocol.cuda_errors import OUT_OF_MEMORY_FIX
from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.harness.target.reference import Reference

GIB = float(1 << 30)
INPUT_COPIES = 2
OUTPUT_COPIES = 4
PARAMETER_COPIES = 2


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def input_bytes(reference: Reference) -> int | None:
    """The size of one input set, measured without allocating it (get_inputs() on the meta
    device; inputs it puts on a device explicitly are made for real). None when get_inputs()
    can't run on the meta device (it reads values, e.g. with .item())."""
    torch.manual_seed(0)
    try:
        with torch.device("meta"):
            return _bytes(reference.module.get_inputs())
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None


def fits(nbytes: int, device: torch.device, *, share: float) -> bool:
    """Whether `nbytes` more fit in `share` of the memory free on `device` now (the host's
    available memory for the CPU, where the tests verify)."""
    if device.type == "cpu":
        free = psutil.virtual_memory().available
    else:
        free, _ = torch.cuda.mem_get_info(device)
    return nbytes <= share * free


def out_of_memory(
    exc: torch.OutOfMemoryError,
    *,
    phase: str,
    reference: Reference | None,
    output_templates: list[torch.Tensor],
    device: torch.device,
) -> HarnessError:
    # The traceback's frames hold the tensors that filled the GPU: let them go before
    # measuring what is free.
    traceback.clear_frames(exc.__traceback__)
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    size = ""
    inputs = input_bytes(reference) if reference is not None else None
    if reference is not None and inputs is not None:
        outputs = _bytes(output_templates)
        parameters = _bytes(t for _, t in reference.tensors())
        needed = INPUT_COPIES * inputs + OUTPUT_COPIES * outputs + PARAMETER_COPIES * parameters
        size = (
            f" One input set is {inputs / GIB:.2f} GiB, the outputs {outputs / GIB:.2f} GiB and "
            f"the parameters {parameters / GIB:.2f} GiB; verifying needs about "
            f"{needed / GIB:.2f} GiB (inputs x{INPUT_COPIES}, outputs x{OUTPUT_COPIES}, "
            f"parameters x{PARAMETER_COPIES})."
        )
    first_line = str(exc).splitlines()[0][:300] if str(exc) else ""
    return HarnessError(
        kind="out_of_memory",
        message=f"The GPU ran out of memory while {phase}: {first_line}.{size} The GPU has "
        f"{total / GIB:.1f} GiB, {free / GIB:.1f} GiB free now.",
        fix=OUT_OF_MEMORY_FIX,
    )
