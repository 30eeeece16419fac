"""What to build for a target: the BuildSpec for each form. Torch-extension flags are computed
here from the installed torch, so only the worker (which has torch) calls `build_spec` for
extension targets."""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

from kernelblaster.harness.build import BuildSpec
from kernelblaster.harness.targets import Target
from kernelblaster.settings import Settings

# Flags torch.utils.cpp_extension passes to nvcc for every CUDA extension.
_TORCH_CUDA_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]


def extension_module_name(source: Path) -> str:
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in source.stem)
    return f"kb_{stem}_{digest}"


def _torch_extension_spec(target: Target, base: BuildSpec) -> BuildSpec:
    import torch
    from torch.utils import cpp_extension

    library_dirs = cpp_extension.library_paths(device_type="cuda")
    abi_flags = [
        f"-D{flag}" if not flag.startswith("-D") else flag
        for flag in getattr(cpp_extension, "_get_pybind11_abi_build_flags", list)()
    ]
    return BuildSpec(
        source=base.source,
        output_kind="shared",
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
            "TORCH_EXTENSION_NAME": extension_module_name(Path(target.source)),
            "TORCH_API_INCLUDE_EXTENSION_H": "1",
            "_GLIBCXX_USE_CXX11_ABI": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
        },
    )


def build_spec(target: Target, settings: Settings) -> BuildSpec:
    base = BuildSpec(
        source=target.source,
        output_kind="executable" if target.kind == "standalone" else "shared",
        arch=settings.arch,
        flags=[*settings.nvcc_flags, *target.nvcc_flags],
    )
    if target.kind == "extension":
        return _torch_extension_spec(target, base)
    return base
