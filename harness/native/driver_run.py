"""The native driver (harness/native/native_driver.py) set up to run a plain target once: its
executable for the launcher's signature, and the spec and data of the call (the reference's
inputs under run_once's seed, harness/native/driver_inputs.py). Nsight Compute's pass
(harness/profile/profile.py) and compute-sanitizer's (harness/check/sanitizer.py) run this command
instead of run_once's Python: no torch, no second CUDA context, every buffer its own
cudaMalloc. Worker side: imports torch."""

from __future__ import annotations

from pathlib import Path

import torch

from kernelblaster.harness.native.driver_inputs import write_driver_inputs
from kernelblaster.harness.native.native_driver import (
    UnsupportedSignature,
    build_driver,
    signature_of,
    write_driver_spec,
)
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.plain_launch import launcher_of
from kernelblaster.harness.target.reference import ReferenceError_
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings


def build_driver_ahead(target: Target, settings: Settings) -> None:
    """Compile the native driver of a plain target's launcher into the build cache beside the
    target's own build, so the profile or sanitizer run finds it there instead of compiling after
    timing (1.9 s on an H100's host). Nothing where the driver can't drive the launcher."""
    if target.kind != "plain":
        return
    try:
        signature = signature_of(launcher_of(target))
    except (UnsupportedSignature, StopIteration, OSError):
        return
    build_driver(signature, settings, arch=None)  # the target's arch, unless its flags set one


def driver_command(
    target: Target,
    built: BuildResult,
    settings: Settings,
    scratch: Path,
    *,
    batch_size: int | None = None,
) -> tuple[list[str] | None, str]:
    """The native driver's command line for a plain target, its spec and data written into
    `scratch` (`batch_size`: RunOnceSpec's); or None and why it can't be had."""
    try:
        signature = signature_of(launcher_of(target))
    except UnsupportedSignature as exc:
        return None, f"no driver for its launcher: {exc}"
    driver = build_driver(signature, settings, arch=built.arch or None)
    if not driver.ok or driver.artifact is None:
        error = driver.error
        detail = f"{error.message}\n{error.log[-1000:]}" if error else "nvcc wrote no program"
        return None, f"the driver for {signature.text} did not compile: {detail}"
    assert built.artifact is not None  # a plain target's build is its shared library
    device = torch.device("cuda", settings.gpu)
    try:
        spec = write_driver_inputs(
            target, Path(built.artifact), device, scratch, batch_size=batch_size
        )
        spec_path = write_driver_spec(spec, scratch)
    except (ReferenceError_, OSError, ValueError, RuntimeError) as exc:
        return None, f"the driver's inputs could not be written: {exc}"
    return [driver.artifact, str(spec_path)], ""
