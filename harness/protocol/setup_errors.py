"""Errors of the machine's setup, never of the user's kernel, with their fixes: PyTorch or another
package missing from the worker's interpreter, the counters' permission, a folder that can't be
made, a failure of our own code. Torch-free, so the worker can report a missing torch."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from kernelblaster.folders import FolderError
from kernelblaster.harness.protocol.records import HarnessError

COUNTER_PERMISSION_FIX = (
    "Run the profile as root (sudo), or let every user read the counters: add the line "
    "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` to a file in /etc/modprobe.d/, "
    "then reload the driver (`sudo modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia && "
    "sudo modprobe nvidia`) or reboot. In a container, start it with --cap-add=SYS_ADMIN. "
    "NVIDIA's page 'ERR_NVGPUCTRPERM' explains it: https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


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


# The NVIDIA driver makes this device when it loads: without it no kernel runs here, whatever
# PyTorch is installed.
NVIDIA_CONTROL_DEVICE = Path("/dev/nvidiactl")

WITHOUT_A_GPU = (
    "Without one, build diagnostics, registers, spills and occupancy (`kernelblaster build`), "
    "saved Nsight Compute reports (`kernelblaster analyze`) and the knowledge base still work."
)


def no_nvidia_driver(cpu_only_torch: str | None) -> HarnessError | None:
    """This machine has no NVIDIA driver, or None. Checked before a CPU-only PyTorch
    (`cpu_only_torch`), whose install fix alone would not let a kernel run here."""
    if NVIDIA_CONTROL_DEVICE.exists():
        return None
    torch_too = (
        f" The PyTorch in {sys.executable} ({cpu_only_torch}) is a CPU-only build as well."
        if cpu_only_torch
        else ""
    )
    return HarnessError(
        kind="no_gpu",
        message="This machine has no NVIDIA GPU driver (no /dev/nvidiactl): kernels are built, "
        f"but not run, verified, timed or profiled here.{torch_too}",
        fix="Run check, profile and optimize on a machine with an NVIDIA GPU, its driver "
        f"(`nvidia-smi` must work) and a CUDA build of PyTorch. {WITHOUT_A_GPU}",
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


# The distributions of the modules KernelBlaster imports under another name (pyproject.toml).
_DISTRIBUTIONS = {
    "ncu_report": "ncu-report",
    "tree_sitter": "tree-sitter",
    "tree_sitter_cuda": "tree-sitter-cuda",
    "psycopg": "psycopg[binary]",
}


def module_missing(exc: ModuleNotFoundError) -> HarnessError:
    """A dependency other than torch that the worker's interpreter cannot import, with the pip
    command for that interpreter."""
    if is_torch(exc):
        return torch_missing()
    module = (exc.name or str(exc)).split(".")[0]
    package = _DISTRIBUTIONS.get(module, module)
    python = sys.executable or "python3"
    return HarnessError(
        kind="dependency_missing",
        message=f"The Python module `{module}` that KernelBlaster needs is not installed in "
        f"{python}: nothing was judged.",
        fix=f"Install it there: `{python} -m pip install '{package}'` (or reinstall KernelBlaster "
        "with its dependencies).",
    )


def folder_error(exc: FolderError) -> HarnessError:
    """A folder KernelBlaster writes to that can't be made: the machine's setup, never the
    kernel's fault."""
    return HarnessError(kind="setup_path", message=exc.message, fix=f"{exc.fix}.")


def internal_error(exc: BaseException, *, phase: str) -> HarnessError:
    """The harness's own code raised `exc` during `phase`, where no candidate code runs: our bug (or
    the machine's), reported with its traceback, never a verdict on the kernel."""
    return HarnessError(
        kind="internal",
        message=f"KernelBlaster's harness failed during {phase}: {type(exc).__name__}: {exc}. "
        "Your kernel was not judged by this.",
        fix="Run the command again; if it fails the same way, report it with the log "
        "(`kernelblaster --version`, the command and this traceback).",
        log="".join(traceback.format_exception(exc))[-4000:],
    )
