"""Setup errors about PyTorch in the worker's interpreter, with the install command for that
interpreter. Torch-free: the worker reports a missing torch without importing it."""

from __future__ import annotations

import sys

from kernelblaster.harness.records import HarnessError


def _install_fix() -> str:
    python = sys.executable or "python3"
    return (
        f"Install a CUDA build of PyTorch that matches your driver into it: `{python} -m pip "
        "install torch` (other CUDA versions: https://pytorch.org/get-started/locally/)."
    )


def torch_missing() -> HarnessError:
    """An interpreter without PyTorch (e.g. `pip install kernelblaster` alone): kernels build,
    nothing runs. Names the interpreter, since that is where torch has to go."""
    return HarnessError(
        kind="torch_missing",
        message=f"PyTorch is not installed in {sys.executable}: kernels are built, but not "
        "run, verified, timed or profiled.",
        fix=_install_fix(),
    )


def torch_cpu_only(version: str) -> HarnessError:
    return HarnessError(
        kind="torch_missing",
        message=f"The PyTorch in {sys.executable} ({version}) is a CPU-only build: kernels are "
        "built, but not run, verified, timed or profiled.",
        fix=_install_fix(),
    )


def is_torch(exc: ModuleNotFoundError) -> bool:
    """Whether the missing module is torch (or part of it), not something torch needs."""
    return (exc.name or "").split(".")[0] == "torch"
