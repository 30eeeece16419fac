"""PyTorch eager and torch.compile timings of a reference, cached per (reference source, GPU,
torch version), since torch.compile takes tens of seconds and the reference rarely changes.
Worker side: imports torch."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import msgspec
import torch

from kernelblaster.harness.records import Timing
from kernelblaster.harness.reference import Reference
from kernelblaster.harness.timing import CudaClock, time_callable


class Baselines(msgspec.Struct, kw_only=True):
    eager: Timing
    compiled: Timing | None = None
    compile_error: str | None = None


def _cache_file(reference: Reference, device: torch.device, cache_dir: Path) -> Path:
    key = hashlib.sha256()
    key.update(reference.path.read_bytes())
    key.update(torch.cuda.get_device_name(device).encode())
    key.update(torch.__version__.encode())
    return cache_dir / "baselines" / f"{key.hexdigest()[:24]}.json"


def measure_baselines(
    reference: Reference, input_sets: list[list], device: torch.device, cache_dir: Path
) -> Baselines:
    path = _cache_file(reference, device, cache_dir)
    if path.is_file():
        try:
            return msgspec.json.decode(path.read_bytes(), type=Baselines)
        except msgspec.DecodeError:
            path.unlink()  # a stale format; measured again below
    model = reference.model
    clock = CudaClock(device)

    def eager(inputs):
        with torch.no_grad():
            return model(*inputs)

    result = Baselines(eager=time_callable(eager, input_sets, clock=clock))
    try:
        compiled_model = torch.compile(model)

        def compiled(inputs):
            with torch.no_grad():
                return compiled_model(*inputs)

        result.compiled = time_callable(compiled, input_sets, clock=clock)
    except Exception as exc:  # noqa: BLE001 - torch.compile failing is reported, not fatal
        result.compile_error = f"{type(exc).__name__}: {str(exc)[:300]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic replace: a concurrent reader sees the old file or the new one, never half of one.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.encode(result))
    os.replace(tmp, path)
    return result
