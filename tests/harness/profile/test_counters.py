"""The in-process profile's own logic, without a GPU (harness/profile/counters.py): which targets it
refuses, and how a CUPTI session (ranges of counters, launch records) becomes KernelProfiles the
classifier reads. The session is made of what a real one holds: the counters ncu measured for
relu_naive on an H100, a torch kernel launched in the same call, the launch as the driver saw
it, and the registers ptxas gives when the driver's can't be read."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.classify import classify
from kernelblaster.harness.analysis.counter_metrics import COUNTER_METRICS
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.check import cupti
from kernelblaster.harness.check.check import gpu_problem
from kernelblaster.harness.profile.counters import kernel_profiles, profile_in_process
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings

REPO = Path(__file__).resolve().parents[3]
RELU_REPORT = REPO / "tests" / "fixtures" / "ncu" / "h100-examples" / "relu.ncu-rep"
TORCH_KERNEL = (  # a torch kernel's mangled name, as an H100 report recorded it
    "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution_"
    "elementwise_grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIN3c108BFloat16"
    "EfPNS_17CUDAGeneratorImplEZZZNS4_13normal_kernelIS9_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENK"
    "UlvE2_clEvEUlfE_EEvRNS_18TensorIteratorBaseET1_T2_EUlP24curandStatePhilox4_32_10E0_ZNS1_27di"
    "stribution_nullary_kernelIS7_f6float4S9_SO_SH_EEvSJ_SL_RKT3_T4_EUlifE_EEvlNS_15PhiloxCudaSta"
    "teESK_SL_"
)
H100 = {
    "chip": "GH100",
    "supported": COUNTER_METRICS,
    "unsupported": [],
    "passes": 19,
    "config_bytes": 29784,
    "cached": False,
    "device_support": "supported",
    "device": 0,
    "sm_count": 132,
    "compute_capability": [9, 0],
    "seconds": {},
}


def test_a_standalone_program_is_left_to_ncu(tmp_path):
    settings = Settings(cache_dir=str(tmp_path))
    target = resolve_target(REPO / "examples" / "saxpy_program.cu", settings)
    assert isinstance(target, Target) and target.kind == "standalone"
    unbuilt = BuildResult(ok=True, source=target.source, arch="sm_90")
    report, error = profile_in_process(target, unbuilt, settings)
    assert report is None
    assert error.kind == "counters_failed"
    assert "calls in the worker only" in error.message and "process of its own" in error.message
    assert "ncu" in error.fix


@pytest.mark.parametrize("example", ["bias_gelu_scale.cu", "kernelbench/19_ReLU_solution.py"])
def test_extensions_and_solutions_are_not_refused_for_their_kind(example, tmp_path):
    """They are calls in the worker, profiled in process as plain launchers are: without a GPU
    what stops them is the missing GPU, not their kind (test_counters_gpu.py profiles them)."""
    settings = Settings(cache_dir=str(tmp_path))
    if gpu_problem(settings) is None:
        pytest.skip("a GPU is here: test_counters_gpu.py profiles them")
    target = resolve_target(REPO / "examples" / example, settings)
    assert isinstance(target, Target) and target.kind in ("extension", "kernelbench")
    unbuilt = BuildResult(ok=True, source=target.source, arch="sm_90")
    report, error = profile_in_process(target, unbuilt, settings)
    assert report is None
    assert error == gpu_problem(settings)


@pytest.fixture(scope="module")
def relu_build(tmp_path_factory) -> BuildResult:
    settings = Settings(cache_dir=str(tmp_path_factory.mktemp("cache")))
    target = resolve_target(REPO / "examples" / "relu.cu", settings)
    built = build(build_spec(target, settings), settings)
    if not built.ok and built.error.kind == "nvcc_missing":
        pytest.skip("needs nvcc on PATH")
    assert built.ok, built.error
    return built


def _launch(name: str, *, grid: int, registers: int, status: int = 0, pass_index: int = 0):
    return {
        "name": name,
        "grid": [grid, 1, 1],
        "block": [128, 1, 1],
        "cluster": [0, 0, 0],
        "shared_dynamic": 0,
        "registers": registers,
        "shared_static": 0 if registers >= 0 else -1,
        "local_bytes": 0,
        "max_threads_per_block": 1024,
        "attribute_error": ""
        if registers >= 0
        else "cuFuncGetAttribute: CUDA_ERROR_INVALID_HANDLE",
        "status": status,
        "pass": pass_index,
    }


def _session(launches: list[dict], ranges: list[list[float | None]], **fields):
    record = {
        "metrics": COUNTER_METRICS,
        "ranges": [{"name": str(i), "values": values} for i, values in enumerate(ranges)],
        "dropped_ranges": 0,
        "launches": launches,
        "launch_records_error": "",
        "seconds": {"decode": 0.01, "evaluate": 0.001},
        **fields,
    }
    return msgspec.convert(record, cupti.SessionRecord)


@pytest.fixture(scope="module")
def ncu_relu():
    return read_report(RELU_REPORT).kernels[0]


def _counters(kernel) -> list[float | None]:
    return [kernel.metrics.get(name) for name in COUNTER_METRICS]


@pytest.mark.nvcc
def test_a_session_becomes_one_profile_per_launch_of_the_files_kernels(relu_build, ncu_relu):
    relu = relu_build.resources[0].name  # mangled, as the driver names the launch
    torch_fill = [1.0] * len(COUNTER_METRICS)
    session = _session(
        [
            _launch(TORCH_KERNEL, grid=1024, registers=32),
            _launch(relu, grid=1 << 30, registers=16, status=1),  # refused: no range
            _launch(relu, grid=131072, registers=-1),  # attributes unreadable: ptxas's
        ],
        [torch_fill, _counters(ncu_relu)],
    )
    prepared = msgspec.convert(H100, cupti.Prepared)
    profiles, error = kernel_profiles(session, prepared, ["relu_naive"], relu_build, "kernel")
    assert error is None
    [profile] = profiles
    assert profile.name == "relu_naive" and profile.demangled.startswith("relu_naive(")
    assert profile.launch.grid == [131072, 1, 1] and profile.launch.block == [128, 1, 1]
    assert profile.launch.registers_per_thread == relu_build.resources[0].registers
    assert profile.duration_ns == ncu_relu.duration_ns
    assert profile.launch.waves_per_sm == pytest.approx(ncu_relu.launch.waves_per_sm)
    for name in (m.SM_PCT, m.DRAM_PCT, m.ACHIEVED_OCCUPANCY, m.stall_metric("long_scoreboard")):
        assert profile.metrics[name] == ncu_relu.metrics[name]
    assert profile.metrics[m.THEORETICAL_OCCUPANCY] == ncu_relu.metrics[m.THEORETICAL_OCCUPANCY]
    assert classify(profile, arch="sm_90").state == classify(ncu_relu, arch="sm_90").state


@pytest.mark.nvcc
def test_counters_cupti_could_not_give_are_absent(relu_build, ncu_relu):
    relu = relu_build.resources[0].name
    values = _counters(ncu_relu)
    values[COUNTER_METRICS.index(m.L1_HIT_RATE)] = None  # a ratio of nothing: no number
    session = _session([_launch(relu, grid=131072, registers=16)], [values])
    prepared = msgspec.convert(H100, cupti.Prepared)
    [profile], error = kernel_profiles(session, prepared, ["relu_naive"], relu_build, "kernel")
    assert (
        error is None and m.L1_HIT_RATE not in profile.metrics and m.L2_HIT_RATE in profile.metrics
    )


@pytest.mark.nvcc
def test_ranges_that_do_not_match_the_launches_are_refused(relu_build, ncu_relu):
    relu = relu_build.resources[0].name
    prepared = msgspec.convert(H100, cupti.Prepared)
    two_launches = [_launch(relu, grid=131072, registers=16)] * 2
    _, error = kernel_profiles(
        _session(two_launches, [_counters(ncu_relu)]),
        prepared,
        ["relu_naive"],
        relu_build,
        "kernel",
    )
    assert error.kind == "counters_failed"
    assert "1 ranges (0 dropped) for 2 kernel launches" in error.message
    unrecorded = _session(
        [],
        [_counters(ncu_relu)],
        launch_records_error="cuptiSubscribe: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
    )
    _, error = kernel_profiles(unrecorded, prepared, ["relu_naive"], relu_build, "kernel")
    assert "launches were not recorded" in error.message
    assert "MULTIPLE_SUBSCRIBERS" in error.message


@pytest.mark.nvcc
def test_user_replay_takes_the_first_pass_and_needs_the_same_launches_in_each(relu_build, ncu_relu):
    relu = relu_build.resources[0].name
    prepared = msgspec.convert(H100, cupti.Prepared)
    same = [_launch(relu, grid=131072, registers=16, pass_index=p) for p in range(3)]
    profiles, error = kernel_profiles(
        _session(same, [_counters(ncu_relu)]), prepared, ["relu_naive"], relu_build, "user"
    )
    assert error is None and len(profiles) == 1
    other = [*same[:2], _launch(TORCH_KERNEL, grid=8, registers=32, pass_index=2)]
    _, error = kernel_profiles(
        _session(other, [_counters(ncu_relu)]), prepared, ["relu_naive"], relu_build, "user"
    )
    assert error.kind == "counters_failed" and "in pass 2 of the user replay" in error.message


@pytest.mark.nvcc
def test_a_launcher_launching_none_of_the_files_kernels_says_what_it_launched(relu_build):
    prepared = msgspec.convert(H100, cupti.Prepared)
    session = _session(
        [_launch(TORCH_KERNEL, grid=8, registers=32)], [[1.0] * len(COUNTER_METRICS)]
    )
    profiles, error = kernel_profiles(session, prepared, ["relu_naive"], relu_build, "kernel")
    assert profiles == []
    assert "no kernel matching relu_naive" in error.message
    assert "distribution_elementwise_grid_stride_kernel" in error.message
