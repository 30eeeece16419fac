"""PyTorch eager and torch.compile timings of a reference, cached on disk per (reference source,
GPU, torch version): torch.compile takes tens of seconds and the reference rarely changes.
Measured in the clean reference process, read back in the worker. Imports torch."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

import msgspec
import torch

from kernelblaster.folders import CACHE_FIX, made_folder
from kernelblaster.harness.check.timing import device_clock, time_callable
from kernelblaster.harness.protocol.records import Timing
from kernelblaster.harness.target.reference import Reference


class Baselines(msgspec.Struct, kw_only=True):
    eager: Timing
    compiled: Timing | None = None
    compile_error: str | None = None
    # Where this measurement's seconds went (baselines_eager; baselines_compile: torch.compile's
    # compilation, in its first call; baselines_compiled_timing); never cached: a read from
    # the cache has none.
    seconds: dict[str, float] = {}


# Part of every cache key: baselines kept before they were timed in the clean reference process
# (issue 32) were timed beside a candidate, which may have slowed the reference down; they
# are measured again rather than trusted.
_MEASURED_WHERE = b"clean reference process"


def device_name(device: torch.device) -> str:
    """The device's name, as the cache keys it ("cpu" for the tests' CPU stand-in)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def cache_file(reference_source: bytes, gpu_name: str, cache_dir: Path) -> Path:
    """Where the baselines of a reference with this source, on this GPU, are kept."""
    key = hashlib.sha256()
    key.update(_MEASURED_WHERE)
    key.update(reference_source)
    key.update(gpu_name.encode())
    key.update(torch.__version__.encode())
    return cache_dir / "baselines" / f"{key.hexdigest()[:24]}.json"


def read_cached(path: Path) -> Baselines | None:
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=Baselines)
    except msgspec.DecodeError:
        path.unlink()  # a stale format; measured again
        return None


def store(path: Path, baselines: Baselines) -> None:
    made_folder(path.parent, fix=CACHE_FIX)
    # Atomic replace: a concurrent reader sees the old file or the new one, never half of one.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.encode(baselines))
    os.replace(tmp, path)


def cached_baselines(
    reference_path: Path, device: torch.device, cache_dir: Path
) -> Baselines | None:
    """The baselines measured before for this reference on this GPU, without loading it."""
    return read_cached(cache_file(reference_path.read_bytes(), device_name(device), cache_dir))


class _CompiledAhead(Exception):
    """Raised in place of running what `compile_ahead` compiled."""


def _compile_only(graph, example_inputs):
    """A torch.compile backend that compiles as the default one does (Inductor's compile_fx,
    which fills Inductor's FX graph cache) and runs nothing: its compiled function raises."""
    from torch._inductor.compile_fx import compile_fx

    compile_fx(graph, example_inputs)

    def not_run(*_args):
        raise _CompiledAhead

    return not_run


def compile_ahead(reference: Reference, seed: int, device: torch.device) -> None:
    """torch.compile's compilation of `reference` for `device`, launching nothing on it (the model
    and inputs only allocated there, `fullgraph`, a backend that runs nothing), so it can run
    while another process times a kernel; the measurement's own torch.compile then finds the
    graph in Inductor's cache. A model with a graph break is compiled then, as before."""
    cpu = torch.device("cpu")
    model = reference.model.to(cpu).to_empty(device=device)
    inputs = [
        torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)
        if isinstance(x, torch.Tensor)
        else x
        for x in reference.inputs(seed, cpu)
    ]
    try:
        with torch.no_grad():
            torch.compile(model, backend=_compile_only, fullgraph=True)(*inputs)
    except _CompiledAhead:
        pass


def measure_baselines(
    reference: Reference, input_sets: list[list], device: torch.device, cache_dir: Path
) -> Baselines:
    """The baselines of `reference` on `input_sets`, timed here (the clean reference process)
    unless cached; stored in the cache."""
    path = cache_file(reference.path.read_bytes(), device_name(device), cache_dir)
    cached = read_cached(path)
    if cached is not None:
        return cached
    model = reference.model
    clock = device_clock(device)

    def eager(inputs):
        with torch.no_grad():
            return model(*inputs)

    began = time.perf_counter()
    result = Baselines(eager=time_callable(eager, input_sets, clock=clock))
    seconds = {"baselines_eager": round(time.perf_counter() - began, 4)}
    try:
        compiled_model = torch.compile(model)

        def compiled(inputs):
            with torch.no_grad():
                return compiled_model(*inputs)

        began = time.perf_counter()
        compiled(input_sets[0])  # compiles: CPU work, apart from the timing that follows
        clock.synchronize()
        seconds["baselines_compile"] = round(time.perf_counter() - began, 4)
        began = time.perf_counter()
        result.compiled = time_callable(compiled, input_sets, clock=clock)
        seconds["baselines_compiled_timing"] = round(time.perf_counter() - began, 4)
    except Exception as exc:  # noqa: BLE001 - torch.compile failing is reported, not fatal
        result.compile_error = f"{type(exc).__name__}: {str(exc)[:300]}"
    store(path, result)
    return msgspec.structs.replace(result, seconds=seconds)
