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

import sys
import time
from dataclasses import dataclass, field

import torch

_MISSING = object()


# nn.Module's methods other than these are rebound by torch.compile itself (mutation guards).
_MODULE_CALL = ("__call__", "_call_impl", "_wrapped_call_impl")


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
    }
    for name, module in list(sys.modules.items()):
        if name.startswith("kernelblaster.harness.") and module is not None:
            namespaces[name] = module
    return namespaces


def _bindings(label: str, namespace: object) -> dict[str, object]:
    return {
        name: value
        for name, value in vars(namespace).items()
        if (callable(value) or isinstance(value, staticmethod | classmethod))
        and (label != "torch.nn.Module" or name in _MODULE_CALL)
    }


def _torch_wraps(current: object, original: object) -> bool:
    """Whether `current` is torch's own wrapper around `original` (functools.wraps chain)."""
    seen = 0
    while current is not None and seen < 8:
        if current is original:
            return True
        if not str(getattr(current, "__module__", "")).startswith("torch"):
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
            current = vars(namespace)
            for attribute, original in self.bindings[name].items():
                now = current.get(attribute, _MISSING)
                if now is not original and not _torch_wraps(now, original):
                    yield name, namespace, attribute, original

    def changes(self) -> list[str]:
        """Dotted names rebound or deleted since the snapshot, e.g. `torch.cuda.synchronize`."""
        return [f"{name}.{attribute}" for name, _, attribute, _ in self._changed()]

    def restore(self) -> None:
        for _, namespace, attribute, original in list(self._changed()):
            setattr(namespace, attribute, original)
