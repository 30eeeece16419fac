"""Per-kernel resource usage from `ptxas -v`, launch bounds and definition lines from the PTX nvcc
kept, and readable kernel names. ptxas does not print `__launch_bounds__`; the PTX has them as the
compiler evaluated them (`.maxntid`), templates and macros resolved."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import msgspec

from kernelblaster.harness.analysis.occupancy import theoretical_occupancy
from kernelblaster.harness.protocol.records import KernelResources

DEFAULT_BLOCK_SIZE = 256

# ptxas -v, per kernel:
#   ptxas info    : Compiling entry function '_Z12register_hogPKfPfi' for 'sm_90'
#   ptxas info    : Function properties for _Z12register_hogPKfPfi
#       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 56 registers, used 0 barriers, 4096 bytes smem, 360 bytes cmem[0]
_COMPILING = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"^ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(
    r"^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"^ptxas info\s*: Used (\d+) registers(.*)$")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
_CUMULATIVE_STACK = re.compile(r"(\d+) bytes cumulative stack size")


def parse_ptxas_resources(text: str, *, arch: str) -> list[KernelResources]:
    """One record per kernel (and per arch, when several were compiled), in ptxas's order, with
    occupancy at 256 threads per block (`apply_launch_bounds` refines it). `arch` is used where
    ptxas names none."""
    kernels: list[KernelResources] = []
    current: KernelResources | None = None  # the entry function being compiled
    properties_of: str | None = None  # whose "Function properties" the next line describes
    for line in text.splitlines():
        if match := _COMPILING.match(line):
            name, entry_arch = match.groups()
            current = KernelResources(name=name, demangled=name, arch=entry_arch, registers=0)
            kernels.append(current)
            properties_of = None
        elif match := _PROPERTIES.match(line):
            properties_of = match.group(1)
        elif (match := _FRAME.match(line)) and current is not None:
            if properties_of == current.name:  # not a called device function's frame
                stack, stores, loads = (int(g) for g in match.groups())
                current.stack_bytes = max(current.stack_bytes, stack)
                current.spill_store_bytes, current.spill_load_bytes = stores, loads
            properties_of = None
        elif (match := _USED.match(line)) and current is not None:
            current.registers = int(match.group(1))
            rest = match.group(2)
            if smem := _SMEM.search(rest):
                current.shared_bytes = int(smem.group(1))
            current.constant_bytes = sum(int(c) for c in _CMEM.findall(rest))
            if cumulative := _CUMULATIVE_STACK.search(rest):
                current.stack_bytes = max(current.stack_bytes, int(cumulative.group(1)))
    names = demangle(k.name for k in kernels)
    for kernel in kernels:
        kernel.demangled = names.get(kernel.name, kernel.name)
        kernel.arch = kernel.arch or arch
        _set_occupancy(kernel, DEFAULT_BLOCK_SIZE)
    return kernels


def _set_occupancy(kernel: KernelResources, block_size: int) -> None:
    kernel.occupancy_block_size = block_size
    try:
        occupancy, limiter = theoretical_occupancy(
            kernel.arch,
            registers=kernel.registers,
            shared_bytes=kernel.shared_bytes,
            block_size=block_size,
        )
    except ValueError:  # an arch without a limits table: report usage without occupancy
        kernel.theoretical_occupancy = kernel.occupancy_limiter = None
        return
    kernel.theoretical_occupancy, kernel.occupancy_limiter = occupancy, limiter


# --- PTX ---------------------------------------------------------------------------------


class PtxEntry(msgspec.Struct, kw_only=True):
    """What the PTX says about one kernel: its maximum block size from `__launch_bounds__`
    (`.maxntid`) or an exact one (`.reqntid`), and where it is defined (its first `.loc`)."""

    name: str
    max_threads: int | None = None
    file: str | None = None
    line: int | None = None


_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)")
_NTID = re.compile(r"^\s*\.(?:maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')


def parse_ptx_entries(ptx: str) -> dict[str, PtxEntry]:
    files = {int(m.group(1)): m.group(2) for m in map(_FILE.match, ptx.splitlines()) if m}
    entries: dict[str, PtxEntry] = {}
    current: PtxEntry | None = None
    for line in ptx.splitlines():
        if match := _ENTRY.match(line):
            current = entries.setdefault(match.group(1), PtxEntry(name=match.group(1)))
        elif current is None:
            continue
        elif match := _NTID.match(line):
            x, y, z = (int(g) if g else 1 for g in match.groups())
            current.max_threads = x * y * z
        elif (match := _LOC.match(line)) and current.line is None:
            current.file = files.get(int(match.group(1)))
            current.line = int(match.group(2))
    return entries


def ptx_source_line(ptx: str, ptx_line: int) -> tuple[str, int] | None:
    """The source file and line of PTX line `ptx_line` (1-based): the last `.loc` before it."""
    lines = ptx.splitlines()
    files = {int(m.group(1)): m.group(2) for m in map(_FILE.match, lines) if m}
    for line in reversed(lines[: max(ptx_line, 0)]):
        if (match := _LOC.match(line)) and int(match.group(1)) in files:
            return files[int(match.group(1))], int(match.group(2))
    return None


def apply_launch_bounds(kernels: list[KernelResources], entries: dict[str, PtxEntry]) -> None:
    """Take each kernel's maximum block size from its PTX and compute occupancy at it."""
    for kernel in kernels:
        entry = entries.get(kernel.name)
        if entry is not None and entry.max_threads:
            kernel.max_threads_per_block = entry.max_threads
            _set_occupancy(kernel, entry.max_threads)


# --- demangling --------------------------------------------------------------------------


@cache
def _demangler() -> str | None:
    """cu++filt from the CUDA toolkit; else binutils' c++filt (CUDA uses the same Itanium C++
    ABI for everything but a few CUDA-specific builtins)."""
    candidates = [shutil.which("cu++filt")]
    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    if nvcc is not None:
        homes.insert(0, str(Path(nvcc).resolve().parent.parent))
    candidates += [str(Path(home) / "bin" / "cu++filt") for home in homes if home]
    candidates.append(shutil.which("c++filt"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Readable names for mangled ones (one demangler process for all); a name that can't be
    demangled maps to itself."""
    mangled = sorted({n for n in names if n.startswith("_Z")})
    tool = _demangler()
    if not mangled or tool is None:
        return {n: n for n in mangled}
    try:
        out = subprocess.run(
            [tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return {n: n for n in mangled}
    readable = out.stdout.splitlines()
    if out.returncode != 0 or len(readable) != len(mangled):
        return {n: n for n in mangled}
    return dict(zip(mangled, readable, strict=True))


def kernel_base_names(resources: list[KernelResources]) -> set[str]:
    """The bare names of the kernels a build compiled (ptxas's entry functions): all of them the
    target's own, even those a macro defines, and no library's."""
    return {short_name(kernel.demangled) for kernel in resources}


def short_name(demangled: str) -> str:
    """The bare function name of a demangled signature: "void ns::k<64>(float*)" -> "k"; an
    anonymous namespace's "(anonymous namespace)::" is a scope, not the parameter list."""
    outside_templates = []
    depth = 0
    for char in demangled.replace("(anonymous namespace)", ""):
        if char == "(" and depth == 0:  # the parameter list starts
            break
        depth += (char == "<") - (char == ">")
        if depth == 0 and char != ">":
            outside_templates.append(char)
    identifiers = re.findall(r"[A-Za-z_]\w*", "".join(outside_templates))
    return identifiers[-1] if identifiers else demangled
