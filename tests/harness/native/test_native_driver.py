"""The native driver ncu profiles plain targets through (harness/native/native_driver.py), without
a GPU: its source generated per launcher signature compiles with the real nvcc and is reused from
the build cache; the spec and data file written from a real reference hold the reference's
seeded inputs and parameters byte for byte; the compiled driver, run here, says there is no GPU
or driver, and names its own setup failures so profiling falls back to run_once."""

from __future__ import annotations

import logging
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.analysis.cuda_source import CFunction, extern_c_functions
from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.native.driver_inputs import write_driver_inputs
from kernelblaster.harness.native.native_driver import (
    DriverSignature,
    UnsupportedSignature,
    build_driver,
    driver_source,
    setup_failed,
    signature_of,
    write_driver_spec,
)
from kernelblaster.harness.profile.ncu import classify_ncu_failure
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.plain_launch import launcher_of
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.run_once import PROFILE_SEED, RunOnceSpec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings
from tests.harness.recording_ncu import (
    executable_script,
    profile_quick,
    recorded_argv,
    recording_ncu,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CPU = torch.device("cpu")

# Launchers of several signatures: pointers of many dtypes, int/float/double/int64/unsigned/
# size_t/bool scalars, with and without a status returned and a stream.
LAUNCHERS = {
    "mixed_status": """
        #include <cuda_fp16.h>
        #include <cuda_bf16.h>
        #include <cstdint>
        extern "C" cudaError_t launch(const __half* a, const __nv_bfloat16* b,
                                      const int64_t* index, float* out, int64_t n, float alpha,
                                      double beta, unsigned int flags, size_t count,
                                      bool accumulate, cudaStream_t stream) { return cudaSuccess; }
    """,
    "integers": """
        #include <cstdint>
        extern "C" int launch(const double* x, int8_t* y, long long rows, long cols, int k) {
            return 0;
        }
    """,
}

# A plain pair with everything the calling convention fills: two input tensors and a Python
# scalar input, a parameter and a buffer, two outputs of two dtypes, scalars from a model
# attribute (float), a module constant (double, unsigned) and `n` (int64).
PAIR_REFERENCE = """
    import torch
    from torch import nn

    batch = 8
    features = 64
    eps = 1e-5


    class Model(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(features))
            self.register_buffer("shift", torch.arange(features, dtype=torch.int64))
            self.scale = 0.1

        def forward(self, x, index, k):
            return x * self.weight * self.scale + eps, index + self.shift * k


    def get_inputs():
        return [torch.randn(batch, features), torch.randint(0, 9, (features,)), 3]


    def get_init_inputs():
        return [features]
"""
PAIR_SOURCE = """
    #include <cstdint>
    #include <cuda_runtime.h>

    __global__ void scale_shift(const float* x, const int64_t* index, const float* weight,
                                const int64_t* shift, float* y, int64_t* z, int64_t n,
                                float scale, double eps, unsigned int features) {
        int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] * weight[i % features] * scale + (float)eps;
        if (i < features) z[i] = index[i] + shift[i] * 3;
    }

    extern "C" void launch(const float* x, const int64_t* index, const float* weight,
                           const int64_t* shift, float* y, int64_t* z, int64_t n, float scale,
                           double eps, unsigned int features, cudaStream_t stream) {
        scale_shift<<<(n + 127) / 128, 128, 0, stream>>>(x, index, weight, shift, y, z, n,
                                                          scale, eps, features);
    }
"""


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Settings:
    """One cache for the module: a driver compiled once is reused by the tests after."""
    return Settings(cache_dir=str(tmp_path_factory.mktemp("cache")))


def _launcher(text: str) -> CFunction:
    (launcher,) = extern_c_functions(textwrap.dedent(text))
    return launcher


def _example(name: str, settings: Settings) -> Target:
    target = resolve_target(EXAMPLES / f"{name}.cu", settings)
    assert isinstance(target, Target), target
    return target


@pytest.fixture
def pair(tmp_path, settings) -> Target:
    (tmp_path / "scale_shift.py").write_text(textwrap.dedent(PAIR_REFERENCE))
    (tmp_path / "scale_shift.cu").write_text(textwrap.dedent(PAIR_SOURCE))
    target = resolve_target(tmp_path / "scale_shift.cu", settings)
    assert isinstance(target, Target), target
    return target


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_signatures_are_the_c_types_passed():
    relu = signature_of(launcher_of(_example("relu", Settings())))
    assert relu.text == "void(pointer, pointer, int, cudaStream_t)"
    mixed = signature_of(_launcher(LAUNCHERS["mixed_status"]))
    assert mixed.text == (
        "int(pointer, pointer, pointer, pointer, int64_t, float, double, unsigned int, size_t, "
        "bool, cudaStream_t)"
    )
    # dtypes and names are not part of it: one driver serves every launcher of these C types
    other = _launcher('extern "C" void other(const int* a, double* b, int m, cudaStream_t s) {}')
    assert signature_of(other) == relu


def test_a_scalar_type_the_plain_form_does_not_fill_has_no_driver():
    launcher = _launcher('struct dims { int m; };\nextern "C" void f(float* x, dims d) {}')
    with pytest.raises(UnsupportedSignature, match="dims d"):
        signature_of(launcher)
    with pytest.raises(UnsupportedSignature):  # nor is one generated from a made-up signature
        driver_source(DriverSignature(returns_status=False, params=["pointer", "int); evil("]))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_the_driver_compiles_for_each_signature(name, settings, tmp_path):
    signature = signature_of(_launcher(LAUNCHERS[name]))
    driver = build_driver(signature, settings, arch="sm_90")
    assert driver.ok, driver.error
    assert Path(driver.artifact).is_file()
    source = driver_source(signature)
    assert f'return "{signature.text}";' in source
    # it runs, and checks that a spec is one of its own signature before anything else
    spec = tmp_path / "driver.spec"
    spec.write_text("signature void(pointer)\nstream\n")
    done = _run([driver.artifact, str(spec)])
    assert done.returncode == 2
    assert setup_failed(done.stderr) == (
        f"this driver calls {signature.text}, the spec describes void(pointer)"
    )


@pytest.mark.nvcc
def test_the_build_cache_keeps_one_driver_per_signature(settings):
    relu = signature_of(launcher_of(_example("relu", settings)))
    first = build_driver(relu, settings, arch="sm_90")
    again = build_driver(relu, settings, arch="sm_90")
    assert first.ok and again.ok
    assert again.cached and again.artifact == first.artifact
    # softmax's launcher has another signature (two int scalars): another driver
    softmax = signature_of(launcher_of(_example("softmax", settings)))
    other = build_driver(softmax, settings, arch="sm_90")
    assert other.ok and other.artifact != first.artifact


def _read(data: Path, offset: int, size: int, dtype: torch.dtype) -> torch.Tensor:
    with data.open("rb") as handle:
        handle.seek(offset)
        return torch.frombuffer(bytearray(handle.read(size)), dtype=dtype)


def test_the_relu_spec_holds_run_onces_seeded_input(tmp_path, settings):
    target = _example("relu", settings)
    spec = write_driver_inputs(target, Path("/lib/relu.so"), CPU, tmp_path)
    assert (spec.library, spec.symbol, spec.gpu) == ("/lib/relu.so", "relu", 0)
    assert spec.signature.text == "void(pointer, pointer, int, cudaStream_t)"
    x, y, n, stream = spec.arguments
    run_once_seed = RunOnceSpec(target=target, artifact=None).seed  # run_once's input set
    expected = load_reference(EXAMPLES / "relu.py", CPU).inputs(run_once_seed, CPU)[0]
    assert (x.kind, x.offset, x.bytes) == ("input", 0, expected.numel() * 4)
    assert torch.equal(_read(Path(spec.data), 0, x.bytes, torch.float32), expected)
    assert (y.kind, y.bytes) == ("output", (1 << 24) * 4)
    assert (n.kind, n.value) == ("scalar", str(1 << 24))
    assert stream.kind == "stream"
    assert Path(spec.data).stat().st_size == x.bytes


def test_the_spec_of_a_pair_with_parameters_and_scalars(pair, tmp_path):
    spec = write_driver_inputs(pair, Path("/lib/scale_shift.so"), CPU, tmp_path)
    reference = load_reference(Path(pair.reference), CPU)
    x, index, _k = reference.inputs(PROFILE_SEED, CPU)
    state = dict(reference.tensors())
    kinds = [argument.kind for argument in spec.arguments]
    assert kinds == ["input"] * 4 + ["output"] * 2 + ["scalar"] * 4 + ["stream"]
    data = Path(spec.data)
    offset = 0
    # inputs, then the parameter and the buffer in state_dict order, packed in that order
    for argument, tensor in zip(
        spec.arguments[:4], [x, index, state["weight"], state["shift"]], strict=True
    ):
        assert (argument.offset, argument.bytes) == (offset, tensor.nbytes)
        assert torch.equal(_read(data, offset, argument.bytes, tensor.dtype), tensor.reshape(-1))
        offset += argument.bytes
    assert data.stat().st_size == offset
    y, z = spec.arguments[4:6]
    assert (y.bytes, z.bytes) == (8 * 64 * 4, 64 * 8)
    n, scale, eps, features = (argument.value for argument in spec.arguments[6:10])
    assert n == str(8 * 64)  # the first input's element count
    assert float(scale) == pytest.approx(0.1) and scale == repr(float(torch.tensor(0.1).item()))
    assert eps == repr(1e-5) and features == "64"


def test_the_data_differs_with_the_seed(pair, tmp_path):
    """The driver replays one chosen input set, not whatever get_inputs() draws."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_driver_inputs(pair, Path("/lib/a.so"), CPU, tmp_path / "a", seed=1)
    second = write_driver_inputs(pair, Path("/lib/a.so"), CPU, tmp_path / "b", seed=2)
    assert Path(first.data).read_bytes() != Path(second.data).read_bytes()


@pytest.fixture(scope="module")
def relu_library(settings) -> Path:
    built = build(
        BuildSpec(source=str(EXAMPLES / "relu.cu"), output_kind="shared", arch="sm_90"), settings
    )
    assert built.ok, built.error
    return Path(built.artifact)


@pytest.fixture(scope="module")
def relu_driver(settings) -> Path:
    signature = signature_of(launcher_of(_example("relu", settings)))
    driver = build_driver(signature, settings, arch="sm_90")
    assert driver.ok, driver.error
    return Path(driver.artifact)


@pytest.mark.nvcc
def test_without_a_gpu_the_driver_says_so(settings, relu_library, relu_driver, tmp_path):
    spec = write_driver_inputs(_example("relu", settings), relu_library, CPU, tmp_path)
    done = _run([str(relu_driver), str(write_driver_spec(spec, tmp_path))])
    if done.returncode == 0:
        pytest.skip("this machine has a GPU: the driver ran relu")
    # a CUDA failure (3), not a crash and not one of the driver's own (2: run_once instead)
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("kernelblaster-driver: cudaSetDevice(0) failed: ")
    assert setup_failed(done.stderr) is None
    error = classify_ncu_failure(done.stderr, done.returncode, ["relu_naive"])
    assert error is not None and error.kind in ("no_driver", "no_gpu"), done.stderr
    assert "nvidia-smi" in done.stderr


@pytest.mark.nvcc
def test_the_drivers_own_failures_are_named(settings, relu_library, relu_driver, tmp_path):
    spec = write_driver_inputs(_example("relu", settings), relu_library, CPU, tmp_path)
    spec_path = write_driver_spec(spec, tmp_path)
    text = spec_path.read_text()
    cases = {
        "symbol relu": ("symbol relu_v2", "the library exports no relu_v2"),
        f"library {relu_library}": ("library /nowhere/relu.so", "cannot load the library: "),
        "scalar 16777216": ("scalar 16777216\nscalar 1", "the spec gives 5 arguments for 4"),
        "stream": ("strem", "bad line in "),
    }
    for line, (replacement, why) in cases.items():
        assert line in text
        spec_path.write_text(text.replace(line, replacement))
        done = _run([str(relu_driver), str(spec_path)])
        assert done.returncode == 2, (replacement, done.stderr)
        assert setup_failed(done.stderr).startswith(why), done.stderr


def test_a_driver_that_does_not_compile_leaves_profiling_to_run_once(tmp_path, caplog):
    ncu = recording_ncu(tmp_path / "bin")
    nvcc = executable_script(
        tmp_path / "bin" / "nvcc",
        'case "$1" in --version) echo "Cuda compilation tools, release 0.0 (broken)";; '
        '*) echo "driver.cpp(1): error: this compiler is broken" >&2; exit 1;; esac\n',
    )
    settings = Settings(ncu_path=str(ncu), nvcc=str(nvcc), cache_dir=str(tmp_path / "cache"))
    source = tmp_path / "relu.cu"
    for suffix in (".cu", ".py"):
        shutil.copy(EXAMPLES / f"relu{suffix}", tmp_path / f"relu{suffix}")
    target = resolve_target(source, settings)
    built = BuildResult(
        ok=True, source=str(source), artifact=str(tmp_path / "build" / "relu.so"), arch="sm_90"
    )
    with caplog.at_level(logging.WARNING, logger="kernelblaster.harness.profile.profile"):
        _, messages = profile_quick(target, built, settings)
    assert recorded_argv(ncu)[-3:-1] == ["-m", "kernelblaster.harness.target.run_once"]
    reason = "the driver for void(pointer, pointer, int, cudaStream_t) did not compile"
    assert messages[0] == "ncu (quick) on relu_naive"
    assert messages[1].startswith(f"profiling through run_once: {reason}: nvcc failed")
    assert "this compiler is broken" in messages[1]
    assert any(reason in record.getMessage() for record in caplog.records)


@pytest.mark.nvcc
def test_the_driver_is_compiled_ahead_once_and_the_profile_takes_it_from_the_cache(tmp_path):
    """The worker compiles the driver beside the target's build (build_driver_ahead); the
    profile's own build_driver, begun while that one compiles, waits for it (the build cache's
    lock on the same key: the ahead build's arch resolves to the library's) instead of running
    nvcc a second time, and takes the driver from the cache."""
    import threading

    from kernelblaster.harness.native.driver_run import build_driver_ahead

    settings = Settings(cache_dir=str(tmp_path / "cache"), arch="sm_90")
    target = _example("softmax", settings)
    signature = signature_of(launcher_of(target))
    results: list[BuildResult] = []

    def call(arch: str | None) -> None:
        results.append(build_driver(signature, settings, arch=arch))

    # the ahead build's arch (None: the target's) and the profile's (the built library's)
    calls = [threading.Thread(target=call, args=(arch,)) for arch in (None, "sm_90")]
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    assert all(r.ok for r in results), results
    assert sorted(r.cached for r in results) == [False, True]  # one nvcc run, not two
    assert results[0].artifact == results[1].artifact

    other = Settings(cache_dir=str(tmp_path / "other"), arch="sm_90")
    build_driver_ahead(target, other)
    assert build_driver(signature, other, arch="sm_90").cached
    pair = tmp_path / "pair"
    pair.mkdir()
    source = 'struct dims { int m; };\nextern "C" void launch(float* x, dims d) {}\n'
    (pair / "k.cu").write_text(source)
    (pair / "k.py").write_text("")
    unsupported = Target(kind="plain", source=str(pair / "k.cu"), entry="launch", reference="")
    none = Settings(cache_dir=str(tmp_path / "none"), arch="sm_90")
    build_driver_ahead(unsupported, none)  # a struct argument: no driver, nothing compiled
    assert not (tmp_path / "none" / "drivers").exists()
