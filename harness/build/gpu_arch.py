"""Which `sm_XX` to compile for: the `arch` setting, else the GPU's own compute capability as
nvidia-smi reports it, else sm_90 (so builds and ptxas resource reports still work without a
GPU), with a note saying which of these happened."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache

import msgspec

from kernelblaster.settings import Settings

FALLBACK_ARCH = "sm_90"
_NVIDIA_SMI_TIMEOUT_S = 20.0
_ARCH_NAME = re.compile(r"^sm_\d+[af]?$")


class ArchChoice(msgspec.Struct, kw_only=True):
    arch: str  # e.g. "sm_90"
    detected: bool  # True when read from the GPU
    gpu_name: str | None = None
    note: str = ""


def is_arch_name(arch: str) -> bool:
    return _ARCH_NAME.match(arch) is not None


def detect_arch(settings: Settings) -> ArchChoice:
    if settings.arch:
        return ArchChoice(arch=settings.arch, detected=False, note="from the `arch` setting")
    return _query_gpu(shutil.which("nvidia-smi"), settings.gpu)


@cache
def _query_gpu(nvidia_smi: str | None, gpu_index: int) -> ArchChoice:
    """Asked once per process: the GPU does not change under a running server."""
    fallback = f"; compiling for {FALLBACK_ARCH} (set `arch` to choose another)"
    if nvidia_smi is None:
        return ArchChoice(
            arch=FALLBACK_ARCH,
            detected=False,
            note=f"no GPU found (nvidia-smi is not on PATH){fallback}",
        )
    command = [nvidia_smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run(
            [*command, "-i", str(gpu_index)],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ArchChoice(
            arch=FALLBACK_ARCH, detected=False, note=f"nvidia-smi failed ({exc}){fallback}"
        )
    return _choice_from_query(out, gpu_index, fallback)


def _choice_from_query(
    out: subprocess.CompletedProcess[str], gpu_index: int, fallback: str
) -> ArchChoice:
    """Read `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` output, e.g.
    "NVIDIA H100 80GB HBM3, 9.0"."""
    lines = out.stdout.strip().splitlines()
    name, _, capability = (lines[0] if lines else "").rpartition(",")
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", capability)
    if out.returncode != 0 or match is None:
        reason = (out.stderr or out.stdout).strip().splitlines()
        detail = reason[0] if reason else f"exit status {out.returncode}"
        return ArchChoice(
            arch=FALLBACK_ARCH,
            detected=False,
            note=f"could not read GPU {gpu_index} from nvidia-smi ({detail}){fallback}",
        )
    gpu_name = name.strip()
    return ArchChoice(
        arch=f"sm_{match.group(1)}{match.group(2)}",
        detected=True,
        gpu_name=gpu_name,
        note=f"detected {gpu_name}",
    )
