"""What to do about the build failures whose remedy is known: a fix for the diagnostic naming one.

Each says what to change and where (`nvcc_flags` in kernelblaster.toml, at the top or in the
file's `[[targets]]` entry: kernelblaster/settings.py), and only what the build really does with
it (harness/build/nvcc.py passes the flags to every nvcc run of the build, the link included).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from kernelblaster.harness.protocol.records import SourceDiagnostic

_SEPARATE_COMPILATION = re.compile(
    r"kernel launch from __device__ or __global__ functions requires separate compilation mode"
)
_MISSING_HEADER = re.compile(  # the host compiler's, then EDG's
    r"^(?:\S+:\d+(?::\d+)?: )?(?P<name>[^\s:]+): No such file or directory$"
    r"|^(?:\S+:\d+(?::\d+)?: )?cannot open source file \"(?P<edg>[^\"]+)\""
)
_TOOLKIT_VERSION = re.compile(r"release (?P<major>\d+)\.(?P<minor>\d+)")


class _Library(NamedTuple):
    component: str
    package: str  # in NVIDIA's apt/dnf repository, without the toolkit version's suffix
    link: str | None  # the -l flag its host API needs, if any


# The headers of the CUDA toolkit's libraries, which a toolkit may be installed without.
_LIBRARY_HEADERS: dict[str, _Library] = {
    **dict.fromkeys(
        ("cublas_v2.h", "cublas.h", "cublas_api.h"), _Library("cuBLAS", "libcublas-dev", "-lcublas")
    ),
    "cublasLt.h": _Library("cuBLAS", "libcublas-dev", "-lcublasLt"),
    **dict.fromkeys(("cufft.h", "cufftXt.h"), _Library("cuFFT", "libcufft-dev", "-lcufft")),
    "curand.h": _Library("cuRAND", "libcurand-dev", "-lcurand"),
    "curand_kernel.h": _Library("cuRAND", "libcurand-dev", None),  # device API: headers only
    "cusparse.h": _Library("cuSPARSE", "libcusparse-dev", "-lcusparse"),
    **dict.fromkeys(
        ("cusolverDn.h", "cusolverSp.h"), _Library("cuSOLVER", "libcusolver-dev", "-lcusolver")
    ),
    "nvrtc.h": _Library("NVRTC", "cuda-nvrtc-dev", "-lnvrtc"),
    "nvjpeg.h": _Library("nvJPEG", "libnvjpeg-dev", "-lnvjpeg"),
}


def fix_for(diagnostic: SourceDiagnostic, nvcc_version: str) -> str:
    """The fix for `diagnostic` when its failure has a known remedy, else "". `nvcc_version`:
    `nvcc --version`'s output, naming the toolkit a missing library is to be installed for."""
    if diagnostic.severity != "error":
        return ""
    first = diagnostic.message.splitlines()[0] if diagnostic.message else ""
    if _SEPARATE_COMPILATION.search(first):
        return (
            'Add "-rdc=true" to nvcc_flags in kernelblaster.toml (a launch from device code, '
            "dynamic parallelism, needs relocatable device code); nvcc then links the device "
            "code and the CUDA device runtime (libcudadevrt) into the build itself."
        )
    match = _MISSING_HEADER.search(first)
    if match is None:
        return ""
    name = match["name"] or match["edg"]
    library = _LIBRARY_HEADERS.get(Path(name).name)
    if library is None:
        return (
            f"Add the folder that holds {name} to nvcc_flags in kernelblaster.toml, e.g. "
            f'nvcc_flags = ["-I<folder>"]: a relative folder is relative to the source\'s folder; '
            "one outside the repository, or spelled with `..`, is used only once the file is "
            "trusted (`kernelblaster trust`; in the editor, a trusted workspace)."
        )
    version = _TOOLKIT_VERSION.search(nvcc_version)
    toolkit = f"CUDA {version['major']}.{version['minor']}" if version else "this CUDA toolkit"
    package = f"{library.package}-{version['major']}-{version['minor']}" if version else None
    how = f" (from NVIDIA's package repository: {package})" if package else ""
    fix = (
        f"{name} is a header of {library.component}, a CUDA toolkit component not on this "
        f"nvcc's include path: install {library.component} for {toolkit}{how}"
    )
    if library.link:
        fix += f', and link it: nvcc_flags = ["{library.link}"] in kernelblaster.toml'
    return fix + "."
