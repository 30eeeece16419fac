"""What the GPU tests of the profile paths share: an example pair copied where a test may build
it, and ncu's quick profile of it on the GPU here."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec

from kernelblaster.harness.profile.profile import profile_target
from kernelblaster.harness.protocol.records import BuildResult, ProfileReport
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def copy_example(name: str, folder: Path) -> Path:
    """examples/<name>.cu and its reference copied into `folder`; the .cu's path."""
    for suffix in (".cu", ".py"):
        shutil.copy(EXAMPLES / f"{name}{suffix}", folder / f"{name}{suffix}")
    return folder / f"{name}.cu"


def device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def ncu_quick(
    target: Target, built: BuildResult, settings: Settings, *, native_driver: bool
) -> ProfileReport:
    """ncu's quick profile of `target`, through the native driver or run_once."""
    settings = msgspec.structs.replace(settings, native_profile_driver=native_driver)
    report, error = profile_target(target, built, settings, depth="quick", arch=device_arch())
    assert error is None, f"{error.kind}: {error.message}\n{error.log}"
    return report
