"""How much GPU memory a problem needs, and an out-of-memory failure reported as one. Verification
holds one input set twice (here and in the clean reference process) and three output sets at a
time, besides the parameters and the comparison's chunks; a check that cannot fit is refused
before it starts (`verification_room`). Worker side: imports torch."""

from __future__ import annotations

import gc
import hashlib
import traceback
from pathlib import Path

import msgspec
import psutil
import torch

from kernelblaster.atomic_files import write_atomically
from kernelblaster.folders import CACHE_FIX, made_folder
from kernelblaster.harness.protocol.cuda_errors import OUT_OF_MEMORY_FIX
from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.harness.target.compare import CHUNK_ELEMENTS
from kernelblaster.harness.target.reference import Reference, as_outputs, load_module

GIB = float(1 << 30)
INPUT_COPIES = 2
OUTPUT_COPIES = 3
PARAMETER_COPIES = 2
# The comparison's float64 chunks and their temporaries (harness/target/compare.py), and the
# stream gate's and the checks' small tensors
WORKING_BYTES = 6 * CHUNK_ELEMENTS * 8
# The most a clean reference process holds of sets made ahead (trial_sets.py)
AHEAD_MAX_BYTES = 1 << 30


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


def problem_bytes(path: Path) -> tuple[int, int, int] | None:
    """(one input set, the outputs on it, the model's parameters and buffers) of the
    reference at `path`, in bytes, measured on the meta device: nothing is allocated (but what
    the reference puts on a device explicitly). None where the reference can't run there (it
    reads values, or fails: the check reports that)."""
    try:
        module = load_module(path, f"kernelblaster_sizing_{abs(hash(str(path)))}")
        with torch.device("meta"), torch.no_grad():
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
            outputs = as_outputs(model(*inputs))
    except Exception:  # noqa: BLE001 - any failure: no size, the caller decides without one
        return None
    return _bytes(inputs), _bytes(outputs), model_bytes(model)


def model_bytes(model: torch.nn.Module) -> int:
    """The bytes of a model's parameters and buffers."""
    return _bytes([*model.parameters(), *model.buffers()])


def known_problem_bytes(path: Path, cache: Path) -> tuple[int, int, int] | None:
    """problem_bytes, read back from `cache` where a check or an earlier call kept it, else measured
    and kept: measuring costs 4-5 s the first time in a process (the meta device's first
    operator), which every spare would pay again."""
    try:
        kept = _sizes_file(path, cache)
        return msgspec.json.decode(kept.read_bytes(), type=tuple[int, int, int])
    except (OSError, msgspec.DecodeError):  # not kept yet, or unreadable: measured again
        pass
    sized = problem_bytes(path)
    if sized is not None:
        _keep(path, cache, sized, replace=True)  # a damaged file replaced
    return sized


def remember_problem_bytes(path: Path, cache: Path, sized: tuple[int, int, int]) -> None:
    """Keep (one input set, its outputs, the parameters) of the reference at `path` for
    `known_problem_bytes`, unless they are kept already (a check of it does it each time)."""
    _keep(path, cache, sized, replace=False)


def _keep(path: Path, cache: Path, sized: tuple[int, int, int], *, replace: bool) -> None:
    try:
        kept = _sizes_file(path, cache)
        if replace or not kept.exists():
            made_folder(kept.parent, fix=CACHE_FIX)
            write_atomically(kept, msgspec.json.encode(sized).decode())
    except OSError:
        pass  # not kept: measured again next time; only a spare's head start is at stake


def _sizes_file(path: Path, cache: Path) -> Path:
    """Where `path`'s sizes are kept: named by torch's version and the contents of every .py
    file beside the reference (it may import them), so an edited reference is measured anew."""
    digest = hashlib.sha256(torch.__version__.encode())
    for module in sorted(path.parent.glob("*.py")):
        digest.update(module.name.encode() + b"\0" + module.read_bytes() + b"\0")
    return cache / "problem-sizes" / f"{digest.hexdigest()[:32]}.json"


def return_cached(device: torch.device, *, sets_per_trial: bool) -> None:
    """Between the trials of a large problem, give the caching allocator's freed blocks back to the
    device, so a process holds what its trial uses: a cached block split by a smaller tensor
    can't take the next multi-gigabyte set (issue 32). Never between poisoning and the
    candidate's call."""
    if sets_per_trial and device.type == "cuda":
        torch.cuda.empty_cache()


def verification_bytes(inputs: int, outputs: int) -> int:
    """What verifying holds at most beyond the parameters: one trial's sets (`inputs`: one
    input set, `outputs`: one set of outputs) and the working set."""
    return INPUT_COPIES * inputs + OUTPUT_COPIES * outputs + WORKING_BYTES


def verification_room(
    inputs: int, outputs: int, *, held: int, device: torch.device
) -> HarnessError | None:
    """Why verifying a problem of `inputs` bytes per input set and `outputs` bytes of outputs
    can't fit on `device`, or None. `held`: bytes of the check's own already on the device
    that it gives back or counts among the sets (the probe's inputs, the sets made ahead)."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    needed = verification_bytes(inputs, outputs)
    if needed <= free + held:
        return None
    return HarnessError(
        kind="out_of_memory",
        message=f"This problem can't be verified in the GPU's memory: one input set is "
        f"{inputs / GIB:.2f} GiB and its outputs {outputs / GIB:.2f} GiB; verifying holds about "
        f"{needed / GIB:.2f} GiB at once (inputs x{INPUT_COPIES}: the candidate's and the clean "
        f"reference's; outputs x{OUTPUT_COPIES}: the reference's, the candidate's and a copy; "
        f"{WORKING_BYTES / GIB:.2f} GiB to compare them), and "
        f"{(free + held) / GIB:.1f} GiB of the GPU's {total / GIB:.1f} GiB are free for it.",
        fix="Make get_inputs() smaller (fewer or smaller tensors), or free the GPU (other "
        "processes on it show in nvidia-smi).",
    )


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
