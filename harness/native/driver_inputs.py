"""What the native driver needs to repeat run_once's launch of a plain target: the seeded inputs and
the model's parameters as bytes in one data file, and the spec of what each launcher parameter
receives, taken from plain_launch as run_once's ctypes call does, so the profiled launch is the
verified kernel's workload. Worker side: imports torch."""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from kernelblaster.harness.native.native_driver import DriverArgument, DriverSpec, signature_of
from kernelblaster.harness.target.plain_launch import SCALAR_CTYPES, output_templates, plain_launch
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.run_once import PROFILE_SEED
from kernelblaster.harness.target.targets import Target

DATA_FILE = "driver_inputs.bin"


def write_driver_inputs(
    target: Target,
    library: Path,
    device: torch.device,
    work_dir: Path,
    *,
    seed: int = PROFILE_SEED,
    batch_size: int | None = None,
) -> DriverSpec:
    """Write the data file into `work_dir` and return the spec of the launch (`device`: where
    the reference runs, as run_once runs it; the spec's GPU is its index). Raises
    ReferenceError_ where the reference and the launcher don't fit, as loading the candidate
    would. `batch_size`: run_once's (RunOnceSpec.batch_size)."""
    reference = load_reference(Path(target.reference or ""), device, batch_size=batch_size)
    probe_inputs = reference.inputs(0, device)
    templates = output_templates(reference, probe_inputs)
    launch = plain_launch(target, reference, probe_inputs, templates)
    inputs = reference.inputs(seed, device)
    tensors = [x.contiguous() for x in inputs if isinstance(x, torch.Tensor)]
    data = work_dir / DATA_FILE
    arguments = []
    offset = 0
    with data.open("wb") as out:
        for argument in launch.arguments(tensors, templates):
            if argument.role == "buffer":
                written = out.write(tensor_bytes(argument.value))
                arguments.append(DriverArgument(kind="input", bytes=written, offset=offset))
                offset += written
            elif argument.role == "output":
                size = argument.value.numel() * argument.value.element_size()
                arguments.append(DriverArgument(kind="output", bytes=size))
            elif argument.role == "scalar":
                value = scalar_text(argument.c_type, argument.value)
                arguments.append(DriverArgument(kind="scalar", value=value))
            else:
                arguments.append(DriverArgument(kind="stream"))
    return DriverSpec(
        library=str(library),
        symbol=launch.launcher.name,
        gpu=device.index or 0,
        data=str(data),
        signature=signature_of(launch.launcher),
        arguments=arguments,
    )


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's elements in memory order, as a kernel reads them from its `data_ptr()`."""
    host = tensor.detach().contiguous().cpu()
    return ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())


def scalar_text(c_type: str, value: int | float) -> str:
    """`value` as ctypes passes it to a `c_type` parameter (wrapped to the type's range,
    rounded to float), written so that the driver's strtod/strtoll reads the same number."""
    converted = SCALAR_CTYPES[c_type](value).value
    return repr(int(converted) if isinstance(converted, bool) else converted)
