"""A two-file torch extension (examples/bias_gelu_scale_split.*) built for real with the
installed torch's headers. The CPU wheel has what compiling needs (torch/extension.h, pybind11,
Python's headers) but not the CUDA libraries, so `build_spec` is asked for a CUDA build and the
link uses the libraries this torch has. A one-line edit to the kernels recompiles only them."""

import os
import shutil
from pathlib import Path

import msgspec
import pytest
import torch
from torch.utils import cpp_extension

from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target import target_build
from kernelblaster.harness.target.candidate import load_candidate
from kernelblaster.harness.target.reference import ReferenceError_, load_reference
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, extension_module_name, resolve_target
from kernelblaster.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NAME = "bias_gelu_scale_split"
SM90 = Settings(arch="sm_90")


def cuda_toolkit() -> Path | None:
    """Where the CUDA headers are, as torch looks for them (CUDA_HOME, nvcc's, /usr/local/cuda)."""
    nvcc = shutil.which("nvcc")
    candidates = [
        os.environ.get("CUDA_HOME"),
        os.environ.get("CUDA_PATH"),
        Path(nvcc).resolve().parents[1] if nvcc else None,
        "/usr/local/cuda",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "include" / "cuda_runtime.h").is_file():
            return Path(candidate)
    return None


def spec_for(target: Target, toolkit: Path) -> BuildSpec:
    """build_spec's own extension spec, as with a CUDA build of torch, linking what exists."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_build, "cpu_only_torch", lambda what: None)
        patch.setattr(cpp_extension, "CUDA_HOME", str(toolkit))
        spec = build_spec(target, SM90)
    present = [
        name
        for name in spec.libraries
        if any((Path(d) / f"lib{name}.so").is_file() for d in spec.library_dirs)
    ]
    return msgspec.structs.replace(spec, libraries=present)


def steps(result: BuildResult) -> dict[str, tuple[bool, str, int]]:
    return {
        Path(step.what).name: (step.cached, step.artifact, os.stat(step.artifact).st_mtime_ns)
        for step in result.steps
    }


@pytest.fixture(scope="module")
def first_build(tmp_path_factory):
    toolkit = cuda_toolkit()
    if toolkit is None:
        pytest.skip("no CUDA headers (include/cuda_runtime.h) beside nvcc or in CUDA_HOME")
    work = tmp_path_factory.mktemp("extension")
    for suffix in (".cu", ".cpp", ".py"):
        shutil.copy(EXAMPLES / f"{NAME}{suffix}", work / f"{NAME}{suffix}")
    target = resolve_target(work / f"{NAME}.cu", SM90)
    assert isinstance(target, Target) and target.bindings == str(work / f"{NAME}.cpp")
    spec = spec_for(target, toolkit)
    return work, target, toolkit, build(spec, SM90, cache_dir=work / "cache")


@pytest.mark.nvcc
@pytest.mark.slow
def test_kernels_and_bindings_compile_apart_into_one_python_module(first_build):
    _, target, _, result = first_build
    assert result.ok, result.diagnostics
    assert [(Path(s.what).name, s.cached) for s in result.steps] == [
        (f"{NAME}.cu", False),
        (f"{NAME}.cpp", False),
        ("link", False),
    ]
    module = extension_module_name(target)
    assert module.startswith(f"kb_{NAME}_")  # named after the bindings file
    assert f"PyInit_{module}".encode() in Path(result.artifact).read_bytes()
    assert {k.demangled.split("(")[0] for k in result.resources} == {
        "add_bias",
        "gelu_inplace",
        "scale_inplace",
    }
    # the kernels are compiled with the torch extension flags (as torch's own build does)
    kernels_command = " ".join(result.steps[0].command)
    assert result.command == result.steps[0].command
    assert "--expt-relaxed-constexpr" in kernels_command
    assert f"-DTORCH_EXTENSION_NAME={module}" in kernels_command


@pytest.mark.nvcc
@pytest.mark.slow
def test_a_one_line_edit_to_the_kernels_reuses_the_compiled_bindings(first_build):
    work, target, toolkit, first = first_build
    before = steps(first)
    kernels = work / f"{NAME}.cu"
    kernels.write_text("// one more line\n" + kernels.read_text())
    edited = build(spec_for(target, toolkit), SM90, cache_dir=work / "cache")
    after = steps(edited)
    assert edited.ok and edited.artifact != first.artifact
    assert after[f"{NAME}.cpp"] == (True, *before[f"{NAME}.cpp"][1:])  # same object, untouched
    assert not after[f"{NAME}.cu"][0] and not after["link"][0]

    # A rewrite is built from a copy elsewhere (the worker's candidates/): same bindings object.
    candidate = work / "candidates" / f"{NAME}_0123abcd.cu"
    candidate.parent.mkdir()
    candidate.write_text(kernels.read_text().replace("y[i] *= scale;", "y[i] = y[i] * scale;"))
    rewrite = msgspec.structs.replace(target, source=str(candidate))
    assert extension_module_name(rewrite) == extension_module_name(target)
    rebuilt = steps(build(spec_for(rewrite, toolkit), SM90, cache_dir=work / "cache"))
    assert rebuilt[f"{NAME}.cpp"] == (True, *before[f"{NAME}.cpp"][1:])
    assert not rebuilt[f"{NAME}_0123abcd.cu"][0]


@pytest.mark.nvcc
def test_bindings_that_disagree_with_the_kernels_file_fail_to_load_saying_which(tmp_path):
    """A shared library links with undefined symbols; the loader names the one missing."""
    (tmp_path / "k.cu").write_text("__global__ void k(float* y) { y[0] = 1.0f; }\n")
    bindings = tmp_path / "k.cpp"
    bindings.write_text(
        "void launch_k(float* y, int n);  // k.cu defines no launch_k\n"
        'extern "C" void PyInit_k() { launch_k(nullptr, 0); }\n'
    )
    built = build(BuildSpec(source=str(bindings), output_kind="shared"), SM90, cache_dir=tmp_path)
    assert built.ok, built.diagnostics
    shutil.copy(EXAMPLES / f"{NAME}.py", tmp_path / "k.py")
    target = Target(
        kind="extension",
        source=str(tmp_path / "k.cu"),
        reference=str(tmp_path / "k.py"),
        bindings=str(bindings),
        entry="forward",
    )
    reference = load_reference(tmp_path / "k.py", torch.device("cpu"))
    with pytest.raises(ReferenceError_) as failure:
        load_candidate(target, Path(built.artifact), reference, torch.device("cpu"))
    error = failure.value.error
    assert error.kind == "bad_target"
    assert "launch_k(float*, int)" in error.message
    assert "k.cpp" in error.fix and "k.cu" in error.fix
