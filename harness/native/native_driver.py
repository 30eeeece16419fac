"""The native driver ncu profiles for plain-CUDA targets instead of run_once (and compute-sanitizer
watches, with `native_sanitizer_driver`): a small C++ program that dlopens the library, fills
buffers from a file, calls the launcher once and exits, ~2.5 s under ncu where run_once costs ~7
s. A C call needs the callee's type at compile time, so it is compiled per launcher signature,
through the build cache; the rest is read from the spec file (`DriverSpec`)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Literal

import msgspec

from kernelblaster.harness.analysis.cuda_source import CFunction
from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.plain_launch import SCALAR_CTYPES, STREAM
from kernelblaster.settings import Settings

_RUNTIME = Path(__file__).with_name("native_driver.cpp")

# Printed by the driver when it couldn't set the call up (exit status 2): its own problem, not
# the kernel's, so the profile is taken through run_once instead.
SETUP_FAILED = "kernelblaster-driver: setup failed:"


class UnsupportedSignature(ValueError):
    """A launcher parameter type the driver can't be generated for."""


class DriverSignature(msgspec.Struct, frozen=True, kw_only=True):
    """What the driver's C call depends on: whether the launcher returns a status, and each
    parameter's C type as passed ("pointer", "cudaStream_t", or a scalar type of
    plain_launch.SCALAR_CTYPES)."""

    returns_status: bool
    params: list[str]

    @property
    def text(self) -> str:
        """e.g. "void(pointer, pointer, int, cudaStream_t)"; the spec names it, the driver
        checks it."""
        return f"{'int' if self.returns_status else 'void'}({', '.join(self.params)})"


class DriverArgument(msgspec.Struct, frozen=True, kw_only=True):
    """One launcher argument: a device buffer filled from the data file (`input`: `bytes` at
    `offset`), a poisoned device buffer (`output`: `bytes`), a number (`scalar`: `value`, as
    ctypes would pass it) or the default stream (`stream`)."""

    kind: Literal["input", "output", "scalar", "stream"]
    bytes: int = 0
    offset: int = 0
    value: str = ""


class DriverSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one driver run needs; written as the driver's line-per-directive text
    (`write_spec`, format in native_driver.cpp)."""

    library: str
    symbol: str
    gpu: int
    data: str
    signature: DriverSignature
    arguments: list[DriverArgument]


def signature_of(launcher: CFunction) -> DriverSignature:
    """The driver signature of a plain target's launcher; UnsupportedSignature for a scalar
    type the plain form doesn't fill (plain_launch refuses those with a fix)."""
    params = []
    for p in launcher.params:
        if p.pointer:
            params.append("pointer")
        elif p.base_type == STREAM or p.base_type in SCALAR_CTYPES:
            params.append(p.base_type)
        else:
            raise UnsupportedSignature(f"parameter `{p.type} {p.name}` has no scalar C type")
    return DriverSignature(returns_status=launcher.return_type not in ("void", ""), params=params)


def driver_source(signature: DriverSignature) -> str:
    """The driver's C++ source for launchers of `signature`: native_driver.cpp and the three
    functions it leaves to the signature."""
    c_types, values, kinds = [], [], []
    for index, param in enumerate(signature.params):
        argument = f"arguments[{index}]"
        if param == "pointer":
            c_types.append("void*")
            values.append(f"{argument}.device")
            kinds.append("pointer")
        elif param == STREAM:
            c_types.append(STREAM)
            values.append(f"{STREAM}{{}}")
            kinds.append("stream")
        elif param in SCALAR_CTYPES:  # only known type names reach the generated source
            c_types.append(param)
            values.append(f"scalar<{param}>({argument})")
            kinds.append("scalar")
        else:
            raise UnsupportedSignature(f"no C type for a parameter of kind {param!r}")
    call = f"reinterpret_cast<Launcher>(symbol)({', '.join(values)})"
    quoted_kinds = ", ".join(f'"{kind}"' for kind in kinds)
    body = f"  return {call};" if signature.returns_status else f"  {call};\n  return 0;"
    generated = (
        f'const char* launcher_signature() {{ return "{signature.text}"; }}\n\n'
        f"std::vector<std::string> parameter_kinds() {{ return {{{quoted_kinds}}}; }}\n\n"
        "int call_launcher(void* symbol, const std::vector<Argument>& arguments) {\n"
        f"  using Launcher = {'int' if signature.returns_status else 'void'} (*)"
        f"({', '.join(c_types)});\n"
        f"{body}\n}}\n"
    )
    return _RUNTIME.read_text(encoding="utf-8") + generated


def build_driver(
    signature: DriverSignature, settings: Settings, *, arch: str | None
) -> BuildResult:
    """The driver executable for `signature` (BuildResult.artifact), compiled by nvcc on first
    use and taken from the build cache after (`cached`); a failed BuildResult says why not.
    `arch`: the plain target's (the driver is host code: any name nvcc takes; None detects)."""
    source_text = driver_source(signature)
    directory = settings.cache_folder("drivers")
    digest = hashlib.sha256(source_text.encode()).hexdigest()[:16]
    source = directory / f"driver_{digest}.cpp"
    if not source.is_file():
        # concurrent workers (rollouts) may write it at once: each compiles a whole one
        handle, temporary = tempfile.mkstemp(prefix=".driver-", suffix=".cpp", dir=directory)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(source_text)
        os.replace(temporary, source)
    spec = BuildSpec(source=str(source), output_kind="executable", arch=arch, libraries=["dl"])
    return build(spec, settings)


def write_driver_spec(spec: DriverSpec, directory: Path) -> Path:
    """`spec` as the driver reads it, in `directory`; returns its path. ValueError for a path
    or symbol with a line break (the format is one directive per line)."""
    if any(c in field for field in (spec.library, spec.symbol, spec.data) for c in "\r\n"):
        raise ValueError("a path or symbol of the driver spec holds a line break")
    lines = [
        f"library {spec.library}",
        f"symbol {spec.symbol}",
        f"gpu {spec.gpu}",
        f"data {spec.data}",
        f"signature {spec.signature.text}",
    ]
    for argument in spec.arguments:
        if argument.kind == "input":
            lines.append(f"input {argument.bytes} {argument.offset}")
        elif argument.kind == "output":
            lines.append(f"output {argument.bytes}")
        elif argument.kind == "scalar":
            lines.append(f"scalar {argument.value}")
        else:
            lines.append("stream")
    path = directory / "driver.spec"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def setup_failed(output: str) -> str | None:
    """The driver's own setup failure in a run's output (its line, without the prefix), or
    None: then the output is the kernel's or the GPU's story, reported as it is."""
    for line in output.splitlines():
        if SETUP_FAILED in line:
            return line.split(SETUP_FAILED, 1)[1].strip()
    return None
