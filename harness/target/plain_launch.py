"""The plain form's calling convention: what each parameter of a plain target's `extern "C"`
launcher receives from its reference (docs/targets.md, "Plain CUDA"). One owner, so the ctypes
call (candidate.py) and the native driver ncu profiles pass the same arguments. Worker side:
imports torch."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch

from kernelblaster.harness.analysis.cuda_source import CFunction, extern_c_functions, read_source
from kernelblaster.harness.target.reference import Reference, as_outputs, target_error
from kernelblaster.harness.target.targets import Target

POINTER_DTYPES: dict[str, torch.dtype | None] = {
    "float": torch.float32,
    "double": torch.float64,
    "__half": torch.float16,
    "half": torch.float16,
    "__nv_bfloat16": torch.bfloat16,
    "nv_bfloat16": torch.bfloat16,
    "int": torch.int32,
    "int32_t": torch.int32,
    "unsigned int": torch.int32,
    "long": torch.int64,
    "long long": torch.int64,
    "int64_t": torch.int64,
    "int8_t": torch.int8,
    "char": torch.int8,
    "uint8_t": torch.uint8,
    "unsigned char": torch.uint8,
    "bool": torch.bool,
    "void": None,  # any dtype
}

# The scalar parameter types a launcher may take (C spelling → ctypes type; _SimpleCData is
# the base of ctypes' scalar types).
SCALAR_CTYPES: dict[str, type[ctypes._SimpleCData[Any]]] = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "unsigned int": ctypes.c_uint,
    "unsigned": ctypes.c_uint,
    "long": ctypes.c_long,
    "long long": ctypes.c_longlong,
    "int64_t": ctypes.c_int64,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
}

STREAM = "cudaStream_t"


class TensorArgument(NamedTuple):
    """The tensor of a `buffer` (an input or a parameter/buffer of the model) or of an `output`
    (as the caller passed it: a tensor, or a meta-device template)."""

    role: Literal["buffer", "output"]
    value: torch.Tensor
    c_type: str  # the parameter's base type, e.g. "float", "int64_t", "cudaStream_t"


class ScalarArgument(NamedTuple):
    role: Literal["scalar"]
    value: int | float
    c_type: str


class StreamArgument(NamedTuple):
    role: Literal["stream"]
    value: None
    c_type: str


# What one launcher parameter receives, told apart by `role` (which narrows `value`).
LaunchArgument = TensorArgument | ScalarArgument | StreamArgument


def launcher_of(target: Target) -> CFunction:
    """The target's launcher (`target.entry`, resolved when the target was)."""
    text = read_source(Path(target.source))
    return next(f for f in extern_c_functions(text) if f.name == target.entry)


def output_templates(reference: Reference, probe_inputs: list) -> list[torch.Tensor]:
    """The reference's outputs on the probe inputs (`reference.inputs(0, device)`), as meta
    tensors: their shapes and dtypes, not their memory. Every caller draws them this way, so
    the outputs verification checks are the ones the profiled launch writes."""
    with torch.no_grad():
        outputs = as_outputs(reference.model(*probe_inputs))
    return [torch.empty_like(t, device="meta") for t in outputs]


@dataclass
class PlainLaunch:
    """A plain target's launcher, checked against its reference (`plain_launch`)."""

    launcher: CFunction
    reference: Reference
    state: list[tuple[str, torch.Tensor]]  # the model's parameters and buffers

    @property
    def returns_status(self) -> bool:
        return self.launcher.return_type not in ("void", "")

    def arguments(self, tensors: list[torch.Tensor], outputs: list) -> list[LaunchArgument]:
        """What each parameter receives, in order, for the input tensors `tensors` (contiguous,
        scalars of `get_inputs()` left out) and the outputs `outputs`."""
        pointed: Iterator[tuple[Literal["buffer", "output"], torch.Tensor]] = iter(
            [
                *(("buffer", t) for t in tensors),
                *(("buffer", t) for _, t in self.state),
                *(("output", t) for t in outputs),
            ]
        )
        first = tensors[0] if tensors else None
        arguments: list[LaunchArgument] = []
        for p in self.launcher.params:
            if p.pointer:
                role, tensor = next(pointed)
                arguments.append(TensorArgument(role, tensor, p.base_type))
            elif p.base_type == STREAM:
                arguments.append(StreamArgument("stream", None, STREAM))
            else:
                arguments.append(ScalarArgument("scalar", self._scalar(p.name, first), p.base_type))
        return arguments

    def _scalar(self, name: str, first_input: torch.Tensor | None) -> int | float:
        value = self.reference.scalar(name)
        if value is None and name in ("n", "numel", "size") and first_input is not None:
            value = first_input.numel()
        if value is None:
            raise target_error(
                "shape_mismatch",
                f"Launcher parameter `{name}` matches no attribute of Model and no module "
                f"constant in {self.reference.path.name}.",
                "Name scalar parameters after the reference's constants (e.g. batch_size, dim, "
                "M, N, K) or model attributes; `n`/`numel` mean the first input's element count.",
            )
        return value


def plain_launch(
    target: Target, reference: Reference, probe_inputs: list, templates: list[torch.Tensor]
) -> PlainLaunch:
    """The target's launcher checked against the reference: every scalar type fillable, as
    many pointers as tensors, each pointer's type the tensor's dtype, outputs not const.
    Raises ReferenceError_ saying what doesn't match and how to fix it."""
    launcher = launcher_of(target)
    pointers = [p for p in launcher.params if p.pointer]
    for p in launcher.params:
        if not p.pointer and p.base_type != STREAM and p.base_type not in SCALAR_CTYPES:
            raise target_error(
                "bad_target",
                f"Launcher parameter `{p.type} {p.name}` has a type the harness can't fill.",
                f"Use one of: {', '.join(SCALAR_CTYPES)}, pointers, or cudaStream_t.",
            )
    tensor_inputs = [x for x in probe_inputs if isinstance(x, torch.Tensor)]
    state = reference.tensors()
    expected = len(tensor_inputs) + len(state) + len(templates)
    if len(pointers) != expected:
        raise target_error(
            "shape_mismatch",
            f"{launcher.name} takes {len(pointers)} pointers, but the reference has "
            f"{len(tensor_inputs)} input tensor(s), {len(state)} parameter/buffer tensor(s) "
            f"({', '.join(n for n, _ in state) or 'none'}) and {len(templates)} output(s) = "
            f"{expected}.",
            "Pointers come in this order: inputs, then parameters/buffers in state_dict order, "
            "then outputs.",
        )
    roles = (
        [f"input {i}" for i in range(len(tensor_inputs))]
        + [f"parameter {n}" for n, _ in state]
        + [f"output {i}" for i in range(len(templates))]
    )
    for p, role, tensor in zip(
        pointers, roles, [*tensor_inputs, *(t for _, t in state), *templates], strict=True
    ):
        wanted = POINTER_DTYPES.get(p.base_type, "unknown")
        if wanted == "unknown" or (wanted is not None and wanted != tensor.dtype):
            raise target_error(
                "shape_mismatch",
                f"Launcher parameter `{p.type} {p.name}` receives {role}, which is "
                f"{tensor.dtype} {tuple(tensor.shape)}.",
                "Make the pointer type match the tensor's dtype.",
            )
        if role.startswith("output") and p.const:
            raise target_error(
                "shape_mismatch",
                f"Launcher parameter `{p.type} {p.name}` receives {role} but is const.",
                "Output pointers come last among the pointers and must not be const.",
            )
    return PlainLaunch(launcher=launcher, reference=reference, state=state)
