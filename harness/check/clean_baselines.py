"""The PyTorch baselines (eager and torch.compile) timed in the clean reference process, not the
worker: a candidate loaded in the worker can slow the reference's operators without changing an
output (an ATen kernel registered over torch's), which would inflate its speedups
(docs/checking.md, "The clean reference process"). Torch-free at import."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from kernelblaster.harness.check.baselines import Baselines

QUESTION = "baselines"
# Asked first where the baselines are measured apart (task "baselines", check.baselines_apart):
# torch.compile's compilation, which needs no GPU to itself, ahead of the GPU turn
COMPILE_AHEAD = "baselines_compile_ahead"


def measure_here(
    device: torch.device, reference: str, seeds: list[int], cache_dir: str
) -> Baselines:
    """In the clean process: the baselines of `reference` on the input sets the kernel was
    timed on (drawn from `seeds`), from the cache under `cache_dir` or timed now and cached."""
    import torch

    from kernelblaster.harness.check.baselines import cached_baselines, measure_baselines
    from kernelblaster.harness.check.timing import timing_input_sets
    from kernelblaster.harness.target.reference import load_reference

    path, cache = Path(reference), Path(cache_dir)
    cached = cached_baselines(path, device, cache)
    if cached is not None:
        return cached
    loaded = load_reference(path, device)
    try:
        return measure_baselines(loaded, timing_input_sets(loaded, seeds, device), device, cache)
    finally:
        del loaded
        if device.type == "cuda":  # its sets and torch.compile's blocks back to the device
            torch.cuda.empty_cache()


def compile_ahead_here(device: torch.device, reference: str, seed: int, cache_dir: str) -> str:
    """In the clean process: torch.compile's compilation of `reference` for `device`, launching
    nothing on it (baselines.compile_ahead), unless the baselines are cached; what was done:
    "cached", "compiled", or why it could not be (the measurement then compiles as before)."""
    from kernelblaster.harness.check.baselines import cached_baselines, compile_ahead
    from kernelblaster.harness.target.reference import load_reference

    path = Path(reference)
    if cached_baselines(path, device, Path(cache_dir)) is not None:
        return "cached"
    import torch

    try:
        compile_ahead(load_reference(path, torch.device("cpu")), seed, device)
    except Exception as exc:  # noqa: BLE001 - said; the measurement compiles on its turn
        return f"not compiled ahead: {type(exc).__name__}: {str(exc)[:300]}"
    return "compiled"


ANSWERS: dict[str, Callable[..., Any]] = {
    QUESTION: measure_here,
    COMPILE_AHEAD: compile_ahead_here,
}
