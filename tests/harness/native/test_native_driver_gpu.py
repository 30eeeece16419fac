"""On a GPU: a plain target profiled through the native driver gives what run_once gives (same
kernels, same launch configuration, same classified state), and the worker profiles plain
targets through the driver on save. Prints both paths' ncu wall times (run with -s); the
benchmark is bench/profile_driver.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings
from tests.harness.gpu_examples import copy_example, ncu_quick

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


@pytest.mark.parametrize("name", ["relu", "softmax"])
def test_the_native_driver_profiles_what_run_once_profiles(name, tmp_path):
    source = copy_example(name, tmp_path)
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    target = resolve_target(source, settings)
    assert isinstance(target, Target), target
    built = build(build_spec(target, settings), settings)
    assert built.ok, built.error
    driver, run_once = (
        ncu_quick(target, built, settings, native_driver=native) for native in (True, False)
    )
    assert (driver.program, driver.fallback_reason) == ("native_driver", "")
    assert run_once.program == "run_once"
    print(
        f"\n{name}: ncu through the driver {driver.seconds:.2f} s, "
        f"through run_once {run_once.seconds:.2f} s"
    )
    names = [kernel.name for kernel in driver.kernels]
    assert names == [kernel.name for kernel in run_once.kernels] == kernel_names(source)
    # the same workload: the same grid and block (sized from the same n), registers, shared memory
    assert [k.launch for k in driver.kernels] == [k.launch for k in run_once.kernels]
    states = [(s.kernel, s.bottleneck, s.state) for s in classify_report(driver)]
    assert states == [(s.kernel, s.bottleneck, s.state) for s in classify_report(run_once)]
    for state in classify_report(driver):
        print(f"  {state.kernel}: {state.state} | {state.summary}")


def test_the_worker_profiles_a_plain_target_through_the_driver(tmp_path):
    source = copy_example("softmax", tmp_path)
    settings = Settings(cache_dir=str(tmp_path / "cache"), native_profile_driver=True)
    request = WorkerRequest(task="profile", source=str(source), settings=settings)
    response = run_harness_sync(request, settings)
    assert response.error is None, response.error
    assert response.check.verify.ok
    assert response.profile.program == "native_driver", response.profile.fallback_reason
    assert [state.kernel for state in response.states] == ["softmax_rowthread"]
    # ncu's run split by when its lines arrive: they arrive as it goes (a split where all came
    # at its exit would put everything in ncu_exit), the kernel's replay taking real time
    split = response.profile.phase_seconds
    print(f"\nncu through the driver, {response.profile.seconds:.2f} s: {split}")
    assert {"ncu_prepare", "ncu_to_connected", "ncu_to_first_kernel", "ncu_read"} <= set(split)
    assert split["ncu_kernels"] > 0.05
    # the driver's data file lived for the profile only
    profile_dir = Path(response.build.artifact).parent / "profile"
    assert not list(profile_dir.glob("driver-*"))
