"""The zero-config pairing of a kernel with its reference: `softmax.cu` beside `softmax.py`.
The one owner of that naming convention; torch-free, so the editor's process uses it too."""

from __future__ import annotations

from pathlib import Path

KERNEL_SUFFIX = ".cu"
REFERENCE_SUFFIX = ".py"


def kernel_beside(reference: Path, folder: Path | None = None) -> Path:
    """The `<stem>.cu` that pairs with `reference` (a KernelBench-style module), in `folder`
    (default: the reference's own)."""
    return (folder or reference.parent) / f"{reference.stem}{KERNEL_SUFFIX}"


def reference_beside(kernel: Path) -> Path:
    """The `<stem>.py` that a kernel source pairs with (it may not exist)."""
    return kernel.with_suffix(REFERENCE_SUFFIX)
