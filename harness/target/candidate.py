"""Calling the kernel under test, whatever its form, as `candidate(inputs) -> outputs`.
Worker side: imports torch.

A plain target's launcher is called through ctypes with the arguments harness/target/plain_launch.py
gives each parameter (the plain form's calling convention); its outputs are allocated here,
NaN-poisoned, and a `cudaStream_t` parameter receives PyTorch's current stream.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.analysis.ptxas import demangle
from kernelblaster.harness.target.plain_launch import SCALAR_CTYPES, STREAM, plain_launch
from kernelblaster.harness.target.reference import (
    Reference,
    ReferenceError_,
    as_outputs,
    load_module,
    target_error,
)
from kernelblaster.harness.target.reference_side import Probe, make_probe
from kernelblaster.harness.target.targets import Target, extension_module_name


@dataclass
class Candidate:
    call: Callable[[list], list[torch.Tensor]]
    own_kernels: set[str]  # base names of the kernels the candidate's source defines
    # The reference's outputs as meta tensors: the shapes and dtypes outputs are checked for.
    output_templates: list[torch.Tensor] = field(default_factory=list)
    # Fill harness-allocated outputs with NaN first (verification); off while timing, so the
    # fill kernel isn't measured as the candidate's time.
    poison: bool = True
    # Wait for the device between preparing harness-allocated outputs and the launch: for
    # verification's run on an idle GPU, where a launcher that doesn't wait for the caller's
    # stream must not race the harness's own fill.
    settle: bool = False
    # Whether the candidate can reach library code the source scan can't see (torch ops), so its
    # launches must be watched, at seconds of start-up. A plain launcher links only the CUDA
    # runtime: it is watched only where the scan warns of a library call.
    may_call_libraries: bool = True

    def __call__(self, inputs: list) -> list[torch.Tensor]:
        return self.call(inputs)


def _plain(
    target: Target,
    library: Path,
    reference: Reference,
    device,
    probe_inputs: list,
    templates: list[torch.Tensor],
) -> Candidate:
    launch = plain_launch(target, reference, probe_inputs, templates)
    function = getattr(ctypes.CDLL(str(library)), launch.launcher.name)
    function.restype = ctypes.c_int if launch.returns_status else None
    function.argtypes = [
        ctypes.c_void_p if p.pointer or p.base_type == STREAM else SCALAR_CTYPES[p.base_type]
        for p in launch.launcher.params
    ]
    candidate = Candidate(
        call=lambda inputs: [],
        own_kernels=set(kernel_names(Path(target.source))),
        output_templates=templates,
        may_call_libraries=False,
    )

    def call(inputs: list) -> list[torch.Tensor]:
        tensors = [x.contiguous() for x in inputs if isinstance(x, torch.Tensor)]
        outputs = [torch.empty(t.shape, dtype=t.dtype, device=device) for t in templates]
        if candidate.poison:
            for out in outputs:
                out.fill_(_poison_value(out.dtype))
        if candidate.settle:
            torch.cuda.synchronize(device)
        args: list[int | float] = []
        for argument in launch.arguments(tensors, outputs):
            if argument.role == "stream":
                args.append(torch.cuda.current_stream(device).cuda_stream)
            elif argument.role == "scalar":
                args.append(argument.value)
            else:
                args.append(argument.value.data_ptr())
        status = function(*args)
        if launch.returns_status and status:
            raise RuntimeError(f"{launch.launcher.name} returned error code {status}")
        return outputs

    candidate.call = call
    return candidate


def _poison_value(dtype: torch.dtype) -> float | int | bool:
    """What an output element holds until the candidate writes it: NaN for floats (never passes
    a comparison), the largest value for integers."""
    if dtype.is_floating_point:
        return float("nan")
    return False if dtype == torch.bool else torch.iinfo(dtype).max


def _extension(target: Target, library: Path, reference: Reference) -> Candidate:
    # The module's init symbol is named after TORCH_EXTENSION_NAME, not after the file.
    name = extension_module_name(target)
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise target_error("bad_target", f"Cannot load the built extension {library}.")
    try:
        module = importlib.util.module_from_spec(spec)
    except ImportError as exc:  # the dynamic loader's own words, e.g. "undefined symbol: _Z..."
        raise _unloadable(target, exc) from exc
    spec.loader.exec_module(module)
    forward = getattr(module, target.entry, None)
    if forward is None:
        raise target_error(
            "entry_missing",
            f"The extension built from {Path(target.source).name} exports no `{target.entry}`.",
            'Add PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }.',
        )
    state = [t for _, t in reference.tensors()]
    return Candidate(
        call=lambda inputs: as_outputs(forward(*inputs, *state)),
        own_kernels=set(kernel_names(Path(target.source))),
    )


def _unloadable(target: Target, exc: ImportError) -> ReferenceError_:
    """Why the dynamic loader refused the built extension, e.g. bindings that declare a launcher
    the kernels file defines with other parameter types (a shared library links anyway)."""
    message = str(exc)
    symbol = re.search(r"undefined symbol: (\S+)", message)
    if symbol is None:
        return target_error("bad_target", f"Cannot load the built extension: {message}")
    name = demangle([symbol.group(1)]).get(symbol.group(1), symbol.group(1))
    if target.bindings:
        fix = (
            f"Declare it in {Path(target.bindings).name} exactly as "
            f"{Path(target.source).name} defines it (name, parameter types, namespace)."
        )
    else:
        fix = 'Define it, or link the library that does (e.g. nvcc_flags = ["-lcublas"]).'
    return target_error(
        "bad_target", f"The built extension uses {name}, which nothing defines.", fix
    )


def import_solution(target: Target) -> ModuleType:
    """A KernelBench solution's module, imported once per worker: importing it is what runs
    its load_inline, i.e. builds its CUDA (torch caches the build across processes)."""
    solution = Path(target.source)
    name = f"kernelblaster_solution_{hashlib.sha256(str(solution).encode()).hexdigest()[:16]}"
    if name in sys.modules:
        return sys.modules[name]
    # KernelBench solutions may import modules beside them (or beside the problem file).
    for directory in {solution.parent, Path(target.reference or solution).parent}:
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
    return load_module(solution, name)


def _kernelbench(target: Target, reference: Reference, device) -> Candidate:
    solution = Path(target.source)
    module = import_solution(target)
    model_class = getattr(module, target.entry, None)
    if model_class is None:
        raise target_error("entry_missing", f"{solution.name} defines no class {target.entry}.")
    torch.manual_seed(0)
    model = model_class(*reference.module.get_init_inputs()).to(device).eval()
    # Same weights as the reference, so outputs are comparable (KernelBench relies on seeding).
    model.load_state_dict(reference.model.state_dict(), strict=False)
    return Candidate(
        call=lambda inputs: as_outputs(model(*inputs)),
        own_kernels=set(kernel_names(solution)),
    )


def load_candidate(
    target: Target,
    artifact: Path | None,
    reference: Reference,
    device: torch.device,
    probe: Probe | None = None,
) -> Candidate:
    """`probe`: the reference's, when made already (harness/target/reference_side.py)."""
    probe = probe or make_probe(reference, reference.inputs(0, device))
    # The reference's outputs: the shapes and dtypes a plain launcher's outputs are allocated
    # with, and the blocks verification poisons for candidates that allocate their outputs
    # themselves (extensions, KernelBench solutions).
    templates = probe.output_templates
    if target.kind == "plain":
        assert artifact is not None
        return _plain(target, artifact, reference, device, probe.inputs, templates)
    if target.kind == "extension":
        assert artifact is not None
        candidate = _extension(target, artifact, reference)
    elif target.kind == "kernelbench":
        candidate = _kernelbench(target, reference, device)
    else:
        raise ValueError(f"{target.kind} targets are programs, not callables")
    candidate.output_templates = templates
    return candidate


def guard_reference(reference: Reference):
    """Context manager: while the candidate runs, calling the reference model is an error
    (a candidate that calls it would pass verification without doing the work)."""
    return _ReferenceGuard(reference)


class ReferenceCalled(RuntimeError):
    pass


def _reference_model_classes(reference: Reference) -> list[type]:
    """The reference's Model class, and the Model of every other copy of the reference file
    imported since (a solution's own `from problem import Model`)."""
    classes: list[type] = [type(reference.model)]
    path = reference.path.resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        model = getattr(module, "Model", None)
        if (
            file
            and isinstance(model, type)
            and Path(file).resolve() == path
            and model not in classes
        ):
            classes.append(model)
    return classes


class _ReferenceGuard:
    def __init__(self, reference: Reference):
        self.model_classes = _reference_model_classes(reference)

    def __enter__(self):
        self.originals = [cls.__dict__.get("forward") for cls in self.model_classes]

        def refuse(*args, **kwargs):
            raise ReferenceCalled("the candidate called the reference model's forward()")

        for cls in self.model_classes:
            cls.forward = refuse
        return self

    def __exit__(self, *exc):
        for cls, original in zip(self.model_classes, self.originals, strict=True):
            if original is None:
                del cls.forward
            else:
                cls.forward = original
        return False


__all__ = ["Candidate", "ReferenceCalled", "guard_reference", "load_candidate"]
