"""What to build for a target: the BuildSpec for each form. Torch-extension flags are computed
here from the installed torch, so only the worker (which has torch) calls `build_spec` for
extension targets."""

from __future__ import annotations

import hashlib
import os
import sysconfig
import time
from pathlib import Path

from kernelblaster.harness.build.gpu_arch import is_arch_name
from kernelblaster.harness.build.nvcc import BuildSpec
from kernelblaster.harness.protocol.records import BuildResult, HarnessError
from kernelblaster.harness.target.targets import Target, extension_module_name
from kernelblaster.settings import Settings

# Flags torch.utils.cpp_extension passes to nvcc for every CUDA extension.
_TORCH_CUDA_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]


class BuildSpecError(Exception):
    """What makes a target unbuildable before nvcc runs, as a HarnessError."""

    def __init__(self, error: HarnessError) -> None:
        super().__init__(error.message)
        self.error = error


def cpu_only_torch(what: str) -> HarnessError | None:
    """Why `what` can't be built with the installed PyTorch (a CPU-only build), or None."""
    import torch

    if torch.version.cuda is not None:
        return None
    return HarnessError(
        kind="torch_missing",
        message=f"{what} needs a CUDA build of PyTorch to compile; this one "
        f"({torch.__version__}) is CPU-only, so it has no CUDA headers or libraries "
        "(setting CUDA_HOME does not help).",
        fix="Install a CUDA build of PyTorch, which compiles extensions on a machine without a "
        "GPU too (https://pytorch.org/get-started/locally/ gives the pip command per CUDA "
        'version), or write the kernel as plain CUDA with an extern "C" launcher, which builds '
        "with nvcc alone.",
    )


def _torch_extension_spec(target: Target, base: BuildSpec) -> BuildSpec:
    import torch
    from torch.utils import cpp_extension

    problem = cpu_only_torch(f"{Path(target.source).name} (a PyTorch extension)")
    if problem is not None:
        raise BuildSpecError(problem)

    library_dirs = cpp_extension.library_paths(device_type="cuda")
    abi_flags = [
        f"-D{flag}" if not flag.startswith("-D") else flag
        for flag in getattr(cpp_extension, "_get_pybind11_abi_build_flags", list)()
    ]
    return BuildSpec(
        source=base.source,
        output_kind="shared",
        extra_sources=[target.bindings] if target.bindings else [],
        include_dirs=[
            *cpp_extension.include_paths(device_type="cuda"),
            sysconfig.get_paths()["include"],
        ],
        library_dirs=library_dirs,
        libraries=["c10", "torch", "torch_cpu", "torch_python", "c10_cuda", "torch_cuda"],
        flags=[
            *base.flags,
            *_TORCH_CUDA_FLAGS,
            *abi_flags,
            *(f"-Xlinker=-rpath,{d}" for d in library_dirs),
        ],
        defines={
            "TORCH_EXTENSION_NAME": extension_module_name(target),
            "TORCH_API_INCLUDE_EXTENSION_H": "1",
            "_GLIBCXX_USE_CXX11_ABI": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
        },
    )


def build_spec(target: Target, settings: Settings) -> BuildSpec:
    """Raises BuildSpecError when the target can't be built here at all."""
    base = BuildSpec(
        source=target.source,
        output_kind="executable" if target.kind == "standalone" else "shared",
        arch=settings.arch,
        flags=[*settings.nvcc_flags, *target.nvcc_flags],
    )
    if target.kind == "extension":
        return _torch_extension_spec(target, base)
    return base


def build_kernelbench(target: Target, settings: Settings) -> BuildResult:
    """A KernelBench solution's CUDA is compiled by torch's load_inline when the solution is
    imported, so building it is importing it (in this worker, like any user code), for the
    `arch` setting when one is given."""
    from kernelblaster.harness.target.candidate import import_solution
    from kernelblaster.harness.target.reference import ReferenceError_

    started = time.perf_counter()
    solution = Path(target.source)
    arch = settings.arch or ""

    def failed(error: HarnessError) -> BuildResult:
        return BuildResult(
            ok=False, source=target.source, arch=arch, error=error, seconds=_since(started)
        )

    if (problem := cpu_only_torch(f"{solution.name} (its load_inline CUDA)")) is not None:
        return failed(problem)
    if arch and is_arch_name(arch):
        major, minor = arch.removeprefix("sm_")[:-1], arch[-1]
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    if "TORCH_EXTENSIONS_DIR" not in os.environ:  # the user's own choice is kept
        os.environ["TORCH_EXTENSIONS_DIR"] = str(load_inline_folder(solution, arch, settings))
    try:
        import_solution(target)
    except ReferenceError_ as exc:
        return failed(
            HarnessError(
                kind="build_failed",
                message=f"Importing {solution.name} (which builds its CUDA with load_inline) "
                "failed; the compiler's output is in the log.",
                fix="Fix the errors the log shows; line numbers there count from the start of "
                "the cuda_sources string.",
                log=exc.error.message[-4000:],
            )
        )
    return BuildResult(ok=True, source=target.source, arch=arch, seconds=_since(started))


def load_inline_folder(solution: Path, arch: str, settings: Settings) -> Path:
    """Where load_inline builds this solution: a folder per source and arch. load_inline
    builds in <folder>/<name>, and an original and its rewrite, which give one name, built side
    by side in one folder, rebuild (and delete) each other's module there."""
    digest = hashlib.sha256(solution.read_bytes() + arch.encode()).hexdigest()[:16]
    return settings.cache_folder("torch_extensions", digest)


def _since(started: float) -> float:
    return time.perf_counter() - started
