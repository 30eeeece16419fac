"""Turning exceptions raised while running a user's kernel into HarnessErrors."""

from __future__ import annotations

from kernelblaster.harness.protocol.records import HarnessError

_DEVICE_FAULTS = (
    "illegal memory access",
    "misaligned address",
    "unspecified launch failure",
    "illegal instruction",
    "out of bounds",
)
DEVICE_FAULT_FIX = (
    "An index went out of bounds or a pointer was misaligned. Check the bounds guards; "
    "`kernelblaster check --sanitize` runs compute-sanitizer to find the line."
)
OUT_OF_MEMORY_FIX = (
    "Make get_inputs() smaller (fewer or smaller tensors), free memory the kernel allocates for "
    "itself, or run on a GPU with more memory; other processes on the GPU count too "
    "(nvidia-smi)."
)


def device_fault(text: str, *, cuda_errors_only: bool = False) -> str | None:
    """The first line of `text` naming a device fault of the kernel's, if one does;
    `cuda_errors_only`: among CUDA's own error lines ("CUDA error: ..."), as in a process's
    stderr, where "out of bounds" may be a Python IndexError's."""
    return next(
        (
            line.strip()
            for line in text.splitlines()
            if any(f in line for f in _DEVICE_FAULTS)
            and (not cuda_errors_only or "CUDA error" in line)
        ),
        None,
    )


def error_from_exception(exc: BaseException, *, kernels: set[str]) -> HarnessError:
    text = str(exc)
    first_line = text.splitlines()[0][:300] if text else ""
    kernel = next(iter(kernels)) if len(kernels) == 1 else None
    if device_fault(text) is not None:
        where = f" in kernel {kernel}" if kernel else f" in one of {', '.join(sorted(kernels))}"
        return HarnessError(
            kind="illegal_memory_access",
            message=f"The kernel faulted{where}: {first_line}",
            fix=DEVICE_FAULT_FIX,
            kernel=kernel,
        )
    if "out of memory" in text.lower():  # e.g. cudaErrorMemoryAllocation from a launcher
        return HarnessError(
            kind="out_of_memory",
            message=f"The GPU ran out of memory: {first_line}",
            fix=OUT_OF_MEMORY_FIX,
            kernel=kernel,
            log=text[-2000:],
        )
    return HarnessError(
        kind="crash",
        message=f"Running the kernel failed: {type(exc).__name__}: {first_line}",
        fix="See the message; the reference and the launcher must agree on shapes and dtypes.",
        kernel=kernel,
        log=text[-2000:],
    )
