"""Catching a candidate that patches the functions the harness measures and compares with.

Published leaderboard hacks replace `torch.cuda.Event.elapsed_time`, `time.perf_counter` or
`torch.cuda.synchronize` (so a timer reads nothing), or a torch op the reference calls (so the
reference computes the candidate's wrong answer). A `RuntimeSnapshot` records which object
every name of those namespaces refers to before the candidate is loaded; `changes()` lists
the names a candidate has since rebound or deleted, and `restore()` puts the originals back so
the rest of the run measures with the real functions. Names added later are not reported:
torch adds attributes lazily and that is nobody's hack; nor is torch wrapping its own function
(importing torch._dynamo, which the CUDA profiler does, wraps `torch.manual_seed`).

This guards against the hacks people have published, inside the worker process the candidate
runs in; it is not a sandbox against code written to defeat KernelBlaster in particular."""

from __future__ import annotations

import importlib
import inspect
import multiprocessing.connection
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

_MISSING = object()


# nn.Module's methods other than these are rebound by torch.compile itself (mutation guards).
_MODULE_CALL = ("__call__", "_call_impl", "_wrapped_call_impl")


# The harness modules verification and timing run on, imported here so that a snapshot taken
# before any user code (a KernelBench solution runs when its build imports it) covers them.
_HARNESS = ("check.baselines", "target.candidate", "check.check", "target.clean_reference",
            "target.compare", "target.memory", "target.reference", "target.reference_session",
            "check.stream_gate", "target.tensor_checks", "check.timing",
            "check.verify")  # fmt: skip


def _watched() -> dict[str, object]:
    """Namespaces by a readable name: timers, torch's CUDA API and event class, torch's and
    Tensor's functions (the reference runs on them), and the harness's own modules."""
    namespaces: dict[str, object] = {
        "time": time,
        "torch": torch,
        "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Stream": torch.cuda.Stream,
        "torch.Tensor": torch.Tensor,
        "torch.nn.functional": torch.nn.functional,
        "torch.nn.Module": torch.nn.Module,
        # what carries the clean reference process's answers (harness/target/clean_reference.py)
        "multiprocessing.connection.Connection": multiprocessing.connection.Connection,
        "torch.multiprocessing.reductions": torch.multiprocessing.reductions,
    }
    for name in _HARNESS:
        importlib.import_module(f"kernelblaster.harness.{name}")
    for name, module in list(sys.modules.items()):
        if name.startswith("kernelblaster.harness.") and module is not None:
            namespaces[name] = module
            for attribute, value in vars(module).items():  # and its own classes' methods
                if isinstance(value, type) and value.__module__ == name:
                    namespaces[f"{name}.{attribute}"] = value
    return namespaces


def _lookup(namespace: object, name: str) -> object:
    """What `namespace.name` resolves to without calling descriptors: a module's own binding,
    or a class's through its bases (torch.Tensor's methods live on torch._C.TensorBase, and
    setting `torch.Tensor.relu` shadows the base's)."""
    if isinstance(namespace, type):
        return inspect.getattr_static(namespace, name, _MISSING)
    return vars(namespace).get(name, _MISSING)


def _bindings(label: str, namespace: object) -> dict[str, object]:
    # torch's classes through their bases (Tensor's methods live on its C base); the
    # harness's own classes by what they define
    through_bases = isinstance(namespace, type) and label.startswith("torch")
    names = dir(namespace) if through_bases else list(vars(namespace))
    if label == "torch.nn.Module":
        names = [name for name in names if name in _MODULE_CALL]
    bindings = {name: _lookup(namespace, name) for name in names}
    return {
        name: value
        for name, value in bindings.items()
        if callable(value) or isinstance(value, staticmethod | classmethod)
    }


_TORCH_DIR = Path(torch.__file__).resolve().parent


def _torch_wraps(current: object, original: object) -> bool:
    """Whether `current` is torch's own wrapper around `original`: a functools.wraps chain of
    functions whose code is in torch's package (wraps copies `__module__`, not the code)."""
    seen = 0
    while current is not None and seen < 8:
        if current is original:
            return True
        code = getattr(current, "__code__", None)
        if code is None or not Path(code.co_filename).resolve().is_relative_to(_TORCH_DIR):
            return False
        current, seen = getattr(current, "__wrapped__", None), seen + 1
    return False


@dataclass
class RuntimeSnapshot:
    namespaces: dict[str, object] = field(default_factory=_watched)
    bindings: dict[str, dict[str, object]] = field(init=False)

    def __post_init__(self) -> None:
        self.bindings = {name: _bindings(name, ns) for name, ns in self.namespaces.items()}

    def _changed(self):
        for name, namespace in self.namespaces.items():
            for attribute, original in self.bindings[name].items():
                now = _lookup(namespace, attribute)
                if now is not original and not _torch_wraps(now, original):
                    yield name, namespace, attribute, original

    def changes(self) -> list[str]:
        """Dotted names rebound or deleted since the snapshot, e.g. `torch.cuda.synchronize`."""
        return [f"{name}.{attribute}" for name, _, attribute, _ in self._changed()]

    def restore(self) -> None:
        for _, namespace, attribute, original in list(self._changed()):
            if isinstance(namespace, type) and attribute in vars(namespace):
                delattr(namespace, attribute)  # a shadowing patch: the base's binding returns
            if _lookup(namespace, attribute) is not original:
                setattr(namespace, attribute, original)
