"""Loading a KernelBench-style reference (`Model`, `get_inputs`, `get_init_inputs`) and drawing
fresh inputs from it. Worker side: imports torch."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from kernelblaster.harness.analysis.reference_source import (
    DEFINITIONS,
    REFERENCE_FORMAT,
    with_batch_size,
)
from kernelblaster.harness.protocol.records import HarnessError


class ReferenceError_(Exception):
    """Raised with a HarnessError describing what is wrong with the reference file."""

    def __init__(self, error: HarnessError):
        super().__init__(error.message)
        self.error = error

    def __reduce__(self):  # raised in the clean reference process, re-raised in the worker
        return (type(self), (self.error,))


def target_error(kind, message: str, fix: str = "") -> ReferenceError_:
    """What doesn't fit between a target and its reference (`kind`: a HarnessError kind)."""
    return ReferenceError_(HarnessError(kind=kind, message=message, fix=fix))


def load_module(path: Path, module_name: str, text: str | None = None) -> ModuleType:
    """The module at `path`, run from `text` instead of the file's contents when given (a copy
    with another batch size: `load_reference`)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ReferenceError_(
            HarnessError(kind="bad_reference", message=f"Cannot import {path}.", fix="")
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        if text is None:
            spec.loader.exec_module(module)
        else:
            exec(compile(text, str(path), "exec"), module.__dict__)
    except Exception as exc:
        raise ReferenceError_(
            HarnessError(
                kind="bad_reference",
                message=f"Importing {path.name} failed: {type(exc).__name__}: {exc}",
                fix="Fix the reference so `python " + path.name + "` imports cleanly.",
            )
        ) from exc
    return module


@dataclass
class Reference:
    module: ModuleType
    model: torch.nn.Module
    path: Path

    def inputs(self, seed: int, device: torch.device) -> list:
        """A fresh input set: `get_inputs()` under `seed`, tensors on `device`.

        `get_inputs()` runs with `device` as torch's default device, so `torch.randn(...)` never
        goes through the host (a 16M-element randn: ~0.1 s on the CPU, under a millisecond on the
        GPU). Every caller makes its sets here, so they agree. One that needs CPU tensors runs
        again on the CPU."""
        raw = None
        if device.type != "cpu":
            torch.manual_seed(seed)
            try:
                with torch.device(device):
                    raw = list(self.module.get_inputs())
            except Exception:  # noqa: BLE001 - it runs again on the CPU, which reports what fails
                raw = None
        if raw is None:
            torch.manual_seed(seed)
            try:
                raw = list(self.module.get_inputs())
            except Exception as exc:
                raise ReferenceError_(
                    HarnessError(
                        kind="bad_reference",
                        message=f"get_inputs() in {self.path.name} failed: {exc}",
                        fix="get_inputs() must return a list of tensors (and scalars).",
                    )
                ) from exc
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in raw]

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Parameters and buffers in `state_dict` order: the order plain launchers receive them
        after the inputs."""
        return list(self.model.state_dict().items())

    def scalar(self, name: str) -> int | float | None:
        """A named size for a plain launcher's scalar parameter: a numeric attribute of the model,
        else a module-level constant of the reference (KernelBench files define e.g. `M`, `N`,
        `batch_size`, `dim` there)."""
        for holder in (self.model, self.module):
            value = getattr(holder, name, None)
            if isinstance(value, bool):
                return int(value)
            if isinstance(value, int | float):
                return value
        return None


def as_outputs(result) -> list[torch.Tensor]:
    """forward() may return a tensor or a tuple/list of tensors."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, list | tuple) and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    raise TypeError(f"forward() returned {type(result).__name__}, expected tensor(s)")


def load_reference(path: Path, device: torch.device, *, batch_size: int | None = None) -> Reference:
    """The reference at `path`; with `batch_size`, as if its `batch_size = ...` said that
    (compute-sanitizer's smaller run, harness/check/sanitizer_inputs.py)."""
    name = f"kernelblaster_reference_{abs(hash(str(path)))}"
    text = None
    if batch_size is not None:
        text = with_batch_size(path.read_text(encoding="utf-8"), batch_size)
        if text is None:
            raise ReferenceError_(
                HarnessError(
                    kind="bad_reference",
                    message=f"{path.name} has no `batch_size = <int>` to set to {batch_size}.",
                    fix="Run it at the size get_inputs() gives.",
                )
            )
        name += f"_batch{batch_size}"
    module = load_module(path, name, text)
    missing = [n for n in DEFINITIONS if not hasattr(module, n)]
    if missing:
        raise ReferenceError_(
            HarnessError(
                kind="bad_reference",
                message=f"{path.name} lacks {', '.join(missing)}.",
                fix=REFERENCE_FORMAT,
            )
        )
    torch.manual_seed(0)
    try:
        model = module.Model(*module.get_init_inputs()).to(device).eval()
    except Exception as exc:
        raise ReferenceError_(
            HarnessError(
                kind="bad_reference",
                message=f"Model(*get_init_inputs()) in {path.name} failed: {exc}",
                fix="Make get_init_inputs() return the arguments Model's constructor takes.",
            )
        ) from exc
    return Reference(module=module, model=model, path=path)
