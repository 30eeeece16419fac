"""The in-process counter library (harness/check/cupti_counters.cpp, harness/check/cupti.py)
without a GPU:
it compiles with the real nvcc through the build cache, links the toolkit's CUPTI by soname with
a run path and not the driver, and its host-only calls answer from CUPTI's own knowledge of each
chip (which of our metrics an H100 or an A100 has). Its GPU calls say there is no driver; CUPTI
failures become the errors the user sees (counter permissions as ncu's are)."""

from __future__ import annotations

import ctypes.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.counter_metrics import COUNTER_METRICS
from kernelblaster.harness.check import cupti
from kernelblaster.harness.protocol.setup_errors import COUNTER_PERMISSION_FIX
from kernelblaster.settings import Settings

HOPPER_ONLY = {
    m.stall_metric("gmma"),
    *m.TENSOR_PIPES[1:],  # warpgroup MMA (wgmma) utilization
}
HAS_DRIVER = ctypes.util.find_library("cuda") is not None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    toolkit = cupti.find_cupti(shutil.which("nvcc"))
    if toolkit is None:
        pytest.skip("this CUDA toolkit has no CUPTI Range Profiler (CUDA 12.6+)")
    settings = Settings(cache_dir=str(tmp_path_factory.mktemp("cache")))
    result, found = cupti.build_library(settings, arch="sm_90")
    assert result.ok, result.error and f"{result.error.message}\n{result.error.log}"
    return settings, result, found


@pytest.fixture(scope="module")
def library(built) -> cupti.CounterLibrary:
    _, result, toolkit = built
    return cupti.load_library(result.artifact, toolkit)


@pytest.mark.nvcc
def test_the_workers_warm_up_finds_the_library_the_profile_builds(built):
    """counters.warm_up asks for the library without an arch (the candidate's, detected or set);
    collect_counters with the candidate's built arch: one cache entry serves both."""
    settings, first, _ = built
    as_warm_up_asks, _ = cupti.build_library(msgspec.structs.replace(settings, arch="sm_90"))
    assert as_warm_up_asks.cached and as_warm_up_asks.artifact == first.artifact


@pytest.mark.nvcc
def test_the_library_builds_once_and_links_cupti_from_the_toolkit(built):
    settings, first, toolkit = built
    again, _ = cupti.build_library(settings, arch="sm_90")
    assert again.cached and again.artifact == first.artifact
    dynamic = subprocess.run(
        ["readelf", "-d", first.artifact], capture_output=True, text=True, check=True
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert toolkit.soname in needed
    assert not [name for name in needed if name.startswith("libcuda.")]  # opened at run time
    run_path = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+?)\]", dynamic)
    assert run_path is not None and run_path.group(1) == toolkit.lib_dir


@pytest.mark.nvcc
def test_it_reports_the_cupti_it_runs_on(library, built):
    _, _, toolkit = built
    info = library.info()
    header = (Path(toolkit.include_dir) / "cupti_version.h").read_text()
    compiled = int(re.search(r"#define CUPTI_API_VERSION (\d+)", header).group(1))
    assert info.compiled_cupti_api == compiled
    assert info.runtime_cupti_api >= compiled
    assert Path(info.libcupti).resolve().parent == Path(toolkit.lib_dir).resolve()
    assert any(Path(path).name == toolkit.soname for path in cupti.library_files())


@pytest.mark.nvcc
def test_an_h100_has_every_metric_the_classifier_needs(library):
    plan = library.check_metrics("GH100", COUNTER_METRICS)
    assert plan.chip == "GH100"
    assert plan.supported == COUNTER_METRICS
    assert plan.unsupported == []
    assert plan.passes > 1 and plan.config_bytes > 0


@pytest.mark.nvcc
def test_metrics_a_chip_lacks_are_left_out_with_cuptis_reason(library):
    plan = library.check_metrics("GA100", [*COUNTER_METRICS, m.GRID_SIZE])
    left_out = {item.metric: item.reason for item in plan.unsupported}
    assert HOPPER_ONLY | {m.GRID_SIZE} <= set(left_out)  # launch__* is ncu's, not a counter
    assert all("CUPTI_ERROR_INVALID_METRIC_NAME" in reason for reason in left_out.values())
    for name in (m.SM_PCT, m.MEMORY_PCT, m.DRAM_PCT, m.stall_metric("long_scoreboard")):
        assert name in plan.supported
    assert plan.passes > 1


@pytest.mark.nvcc
def test_an_unknown_chip_fails_with_cuptis_result(library):
    with pytest.raises(cupti.CuptiFailure) as failed:
        library.check_metrics("XY999", COUNTER_METRICS)
    error = failed.value.error
    assert (error.api, error.call) == ("cupti", "cuptiProfilerHostInitialize")
    assert error.name == "CUPTI_ERROR_INVALID_CHIP_NAME"
    assert "cuptiProfilerHostInitialize failed (CUPTI_ERROR_INVALID_CHIP_NAME" in str(failed.value)


@pytest.mark.nvcc
def test_a_session_needs_the_profiler_prepared_first(library):
    with pytest.raises(cupti.CuptiFailure) as failed:
        library.begin("kernel", 8)
    assert (failed.value.error.call, failed.value.error.name) == ("kbc_begin", "not prepared")
    library.abort()  # nothing open: nothing to undo


PREPARE = r"""
import ctypes, json, pathlib, sys
import msgspec
from kernelblaster.harness.check import cupti
from kernelblaster.harness.analysis.counter_metrics import COUNTER_METRICS
if sys.argv[3] == "after an ncu report":  # what reading one does: Nsight Compute's own nvperf
    import ncu_report
    ctypes.CDLL(str(pathlib.Path(ncu_report.__file__).parent / "libnvperf_host.so"))
toolkit = msgspec.json.decode(sys.argv[2], type=cupti.CuptiToolkit)
library = cupti.load_library(sys.argv[1], toolkit)  # host-only calls work either way
try:
    library.prepare(COUNTER_METRICS)
    print(json.dumps(None))
except cupti.CuptiFailure as failure:
    error = cupti.harness_error(failure.error)
    print(json.dumps({"kind": error.kind, "message": error.message}))
"""


def _prepare_in_a_fresh_process(built, situation: str) -> dict | None:
    """`prepare` in a process of its own: this one may have read ncu reports (other tests)."""
    _, result, toolkit = built
    done = subprocess.run(
        [sys.executable, "-c", PREPARE, result.artifact, msgspec.json.encode(toolkit), situation],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
@pytest.mark.nvcc
def test_without_a_driver_the_profile_says_so(built):
    error = _prepare_in_a_fresh_process(built, "fresh")
    assert error["kind"] == "no_driver"
    assert "libcuda.so.1" in error["message"]


def _failure(api: str, call: str, code: int, name: str, message: str = "") -> cupti.CuptiError:
    return cupti.CuptiError(api=api, call=call, code=code, name=name, message=message or name)


@pytest.mark.parametrize(
    "name",
    [
        "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
        "CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES",
    ],
)
def test_restricted_counters_get_ncus_permission_fix(name):
    error = cupti.harness_error(_failure("cupti", "cuptiRangeProfilerEnable", 35, name))
    assert error.kind == "counter_permission"
    assert error.fix == COUNTER_PERMISSION_FIX
    assert name in error.message and "cuptiRangeProfilerEnable" in error.message


def test_counters_held_by_another_profiler_are_said_so():
    busy = _failure("cupti", "cuptiProfilerInitialize", 26, "CUPTI_ERROR_HARDWARE_BUSY")
    error = cupti.harness_error(busy)
    assert error.kind == "profiler_busy"
    assert "cuptiProfilerInitialize" in error.message and "DCGM" in error.message
    assert "dcgmi profile --pause" in error.fix


def test_other_failures_name_the_call_and_cuptis_words():
    failure = _failure(
        "cupti",
        "cuptiRangeProfilerSetConfig",
        1,
        "CUPTI_ERROR_INVALID_PARAMETER",
        "The parameter is invalid ",
    )
    error = cupti.harness_error(failure)
    assert error.kind == "counters_failed"
    assert (
        "cuptiRangeProfilerSetConfig failed (CUPTI_ERROR_INVALID_PARAMETER: The parameter is "
        "invalid)" in error.message
    )
    assert "ncu" in error.fix
    no_device = _failure("cuda", "cuCtxGetDevice", 100, "CUDA_ERROR_NO_DEVICE")
    assert cupti.harness_error(no_device).kind == "no_gpu"


def _toolkit(root: Path) -> str:
    """A toolkit tree whose nvcc answers a dry run as nvcc does (`#$ TOP=...`)."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f'#!/bin/sh\necho "#$ _HERE_={root}/bin"\necho "#$ TOP={root}/bin/.."\n')
    nvcc.chmod(0o755)
    return str(nvcc)


def test_cupti_is_found_where_older_toolkits_keep_it(tmp_path):
    nvcc = _toolkit(tmp_path / "cuda-12.8")
    assert cupti.find_cupti(nvcc) is None  # no CUPTI at all
    extras = tmp_path / "cuda-12.8" / "extras" / "CUPTI"
    (extras / "include").mkdir(parents=True)
    (extras / "include" / "cupti_range_profiler.h").write_text("")
    (extras / "lib64").mkdir()
    for name in ("libcupti.so", "libcupti.so.12", "libcupti.so.2025.1.0"):
        (extras / "lib64" / name).write_text("")
    found = cupti.find_cupti(nvcc)
    assert found.root == str((tmp_path / "cuda-12.8").resolve())
    assert found.include_dir == str(extras.resolve() / "include")
    assert found.lib_dir == str(extras.resolve() / "lib64")
    assert found.soname == "libcupti.so.12"


def test_without_cupti_the_library_is_not_built_and_says_why(tmp_path):
    settings = Settings(cache_dir=str(tmp_path / "cache"), nvcc=_toolkit(tmp_path / "cuda-12.4"))
    built, toolkit = cupti.build_library(settings, arch="sm_90")
    assert toolkit is None and not built.ok
    assert built.error.kind == "counters_failed"
    assert "CUDA 12.6 or newer" in built.error.message and "cuda-12.4" in built.error.message
    missing = Settings(cache_dir=str(tmp_path / "cache"), nvcc="/nonexistent/nvcc")
    built, _ = cupti.build_library(missing, arch="sm_90")
    assert "'/nonexistent/nvcc' not found" in built.error.message


@pytest.mark.nvcc
def test_a_process_holding_ncu_reports_nvperf_is_refused_instead_of_crashing(built):
    """CUPTI opens libnvperf_host.so by soname: in a process that read an ncu report, that is
    ncu_report's copy, and CUPTI on it crashed the process on an H100."""
    pytest.importorskip("ncu_report")
    error = _prepare_in_a_fresh_process(built, "after an ncu report")
    assert error["kind"] == "counters_failed"  # then profiled through ncu
    assert "ncu_report/libnvperf_host.so" in error["message"]
    assert "has not read an ncu report" in error["message"]
