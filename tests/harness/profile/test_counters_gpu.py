"""On a GPU: the counters collected in process with CUPTI (harness/profile/counters.py) classify
each kernel of the plain examples as ncu's quick profile through run_once does, with the same
launches, and their speed-of-light percentages agree with ncu's within SOL_TOLERANCE percentage
points of peak (ncu flushes the caches before every replay pass; CUPTI's kernel replay may not,
and both measure a different run of the kernel). Prints both paths' times (run with -s); the
diagnostic benchmark is bench/counters_probe.py."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.classify import SOL_BUSY_PCT, classify_report
from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.profile.counters import collect_counters
from kernelblaster.harness.protocol.records import ProfileReport
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerProgress, WorkerRequest
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings
from tests.harness.gpu_examples import EXAMPLES, copy_example
from tests.profiling_holder import another_profile

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SOL = (m.SM_PCT, m.MEMORY_PCT, m.DRAM_PCT, m.L1_PCT, m.L2_PCT)
SOL_TOLERANCE = 10.0  # percentage points of peak
BORDER_PP = 3.0  # a kernel this close to the speed-of-light line may be classified either way


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("counters")


@pytest.fixture(scope="module")
def ncu_reports() -> dict[str, ProfileReport]:
    return {}  # ncu's quick report per example, made once for both replay modes


def _ncu_quick_elsewhere(source: Path, settings: Settings) -> ProfileReport:
    """ncu's quick profile through run_once, read in a worker process: reading a report loads
    Nsight Compute's own libnvperf_host.so, and CUPTI in this process would then run on it
    (cupti.load_library refuses that)."""
    no_counters = msgspec.structs.replace(
        settings, in_process_counters=False, native_profile_driver=False
    )
    request = WorkerRequest(task="profile", source=str(source), settings=no_counters)
    response = run_harness_sync(request, no_counters)
    assert response.error is None, f"{response.error.kind}: {response.error.message}"
    assert response.profile.program == "run_once"
    return response.profile


def _states(report: ProfileReport) -> list[tuple[str, str, str]]:
    return [(s.kernel, s.bottleneck, s.state) for s in classify_report(report)]


@pytest.mark.parametrize("replay", ["kernel", "user"])
@pytest.mark.parametrize("name", ["relu", "softmax", "matmul", "row_sum"])
def test_in_process_counters_classify_as_ncu_does(name, replay, work, ncu_reports):
    folder = work / name
    folder.mkdir(exist_ok=True)
    source = copy_example(name, folder)
    settings = Settings(cache_dir=str(work / "cache"))
    target = resolve_target(source, settings)
    assert isinstance(target, Target) and target.kind == "plain", target
    built = build(build_spec(target, settings), settings)
    assert built.ok, built.error
    if name not in ncu_reports:
        ncu_reports[name] = _ncu_quick_elsewhere(source, settings)
    ncu = ncu_reports[name]

    cold = collect_counters(target, built, settings, replay=replay)
    warm = collect_counters(target, built, settings, replay=replay)
    for run in (cold, warm):
        assert run.error is None, f"{run.error.kind}: {run.error.message}\n{run.error.log}"
    assert warm.prepared.cached  # the profiler and its config image are kept for the next save
    in_process = warm.report
    assert in_process.program == "in_process" and in_process.arch == ncu.arch
    print(
        f"\n{name} ({replay} replay): ncu (run_once) {ncu.seconds:.2f} s, in process "
        f"{cold.report.seconds:.2f} s cold, {in_process.seconds:.2f} s warm "
        f"{ {phase: round(s, 3) for phase, s in in_process.phase_seconds.items()} }"
    )
    names = [kernel.name for kernel in in_process.kernels]
    assert names == [kernel.name for kernel in ncu.kernels] == kernel_names(source)
    for ours, theirs in zip(in_process.kernels, ncu.kernels, strict=True):
        assert (ours.launch.grid, ours.launch.block) == (theirs.launch.grid, theirs.launch.block)
        assert ours.launch.waves_per_sm == pytest.approx(theirs.launch.waves_per_sm)
        for metric in SOL:
            assert ours.metrics[metric] == pytest.approx(theirs.metrics[metric], abs=SOL_TOLERANCE)
    assert _states(in_process) == _states(ncu)
    for state in classify_report(in_process):
        print(f"  {state.kernel}: {state.state} | {state.summary}")


def _same_states_unless_borderline(ours: ProfileReport, ncu: ProfileReport) -> None:
    """Each kernel classified as ncu classifies it, with the same speed of light within
    SOL_TOLERANCE; except that a kernel whose busiest unit is within BORDER_PP of the
    speed-of-light line (SOL_BUSY_PCT) on either run may fall on the other side of it: two runs
    of the kernel, not two readings of one (bias_gelu_scale's add_bias: DRAM 59.3% of peak in
    the committed H100 report)."""
    assert [k.name for k in ours.kernels] == [k.name for k in ncu.kernels]
    ours_states, ncu_states = _states(ours), _states(ncu)
    for index, (mine, theirs) in enumerate(zip(ours.kernels, ncu.kernels, strict=True)):
        for metric in SOL:
            assert mine.metrics[metric] == pytest.approx(theirs.metrics[metric], abs=SOL_TOLERANCE)
        busiest = [max(k.metrics[m.SM_PCT], k.metrics[m.MEMORY_PCT]) for k in (mine, theirs)]
        print(
            f"  {mine.name}: {ours_states[index][2]} vs ncu {ncu_states[index][2]}, busiest "
            f"{busiest[0]:.1f}% vs {busiest[1]:.1f}%"
        )
        if any(abs(b - SOL_BUSY_PCT) <= BORDER_PP for b in busiest):
            continue
        assert ours_states[index] == ncu_states[index]


def _copy_target(name: str, folder: Path) -> tuple[Path, Path | None]:
    """The example `name` copied into `folder`: its source, and its reference where the
    request must name it (a KernelBench solution's problem)."""
    if name == "19_ReLU_solution":
        for file in ("19_ReLU_solution.py", "19_ReLU.py"):
            shutil.copy(EXAMPLES / "kernelbench" / file, folder / file)
        return folder / "19_ReLU_solution.py", folder / "19_ReLU.py"
    return copy_example(name, folder), None


@pytest.mark.parametrize("name", ["relu", "softmax", "bias_gelu_scale", "19_ReLU_solution"])
def test_the_worker_sends_the_in_process_state_before_ncus_profile(name, work):
    """A save's run: after the timing, a progress message with the counters' profile and
    states; then ncu's profile in the response, classifying every kernel the same way. For a
    torch extension and a KernelBench solution too: their verification watched their kernels
    through CUPTI's callbacks, not torch.profiler, whose kineto would have left the counters
    no launch records."""
    folder = work / f"worker-{name}"
    folder.mkdir(exist_ok=True)
    source, reference = _copy_target(name, folder)
    settings = Settings(cache_dir=str(work / "cache"))
    assert settings.in_process_counters  # the default
    messages: list[WorkerProgress] = []
    request = WorkerRequest(
        task="profile",
        source=str(source),
        settings=settings,
        reference=str(reference) if reference else None,
    )
    response = run_harness_sync(request, settings, on_progress=messages.append)
    assert response.error is None, response.error
    early = [message for message in messages if message.states]
    assert len(early) == 1, "\n".join(message.message for message in messages)
    (message,) = early
    assert message.profile.program == "in_process"
    assert message.check.verify.ok and message.check.timing is not None
    assert response.profile.program in ("run_once", "native_driver")
    _same_states_unless_borderline(message.profile, response.profile)
    timed = next(i for i, m in enumerate(messages) if m.check is not None)
    assert messages.index(message) > timed
    watched = "verify_watch" in message.check.phase_seconds
    assert watched == (name in ("bias_gelu_scale", "19_ReLU_solution"))
    print(f"\n{name}: {message.check.phase_seconds}")


def test_the_counters_wait_for_another_process_s_profile(work):
    """CUPTI's profiler and another process's ncu can't hold the GPU's counters at once (the
    driver refuses the second): the in-process counters wait for the profiling lock."""
    folder = work / "waits"
    folder.mkdir(exist_ok=True)
    source = copy_example("relu", folder)
    settings = Settings(cache_dir=str(work / "cache"))
    target = resolve_target(source, settings)
    built = build(build_spec(target, settings), settings)
    assert built.ok, built.error
    heard: list[str] = []
    with another_profile(2.0):
        held = time.time()
        run = collect_counters(
            target, built, settings, progress=lambda _phase, message: heard.append(message)
        )
        done = time.time()
    assert run.error is None, run.error
    assert any(message.startswith("waiting for another profile") for message in heard), heard
    assert done >= held + 2.0  # the holder's two seconds


@pytest.mark.parametrize(
    ("ncu_below_ms", "program"),
    # (None, ncu always, is every other profile test's request)
    [(0.0, "in_process"), (1e9, ("run_once", "native_driver"))],
)
def test_ncu_follows_the_in_process_state_only_below_the_time_asked(ncu_below_ms, program, work):
    """WorkerRequest.ncu_below_ms (the optimize loop's candidates): a kernel timed at or above
    it keeps the counters' profile and states, with no ncu run; below it ncu's profile replaces
    them. The verification and timing are the same run's either way."""
    folder = work / f"below-{ncu_below_ms}"
    folder.mkdir(exist_ok=True)
    source = copy_example("softmax", folder)
    settings = Settings(cache_dir=str(work / "cache"))
    request = WorkerRequest(
        task="profile", source=str(source), settings=settings, ncu_below_ms=ncu_below_ms
    )
    response = run_harness_sync(request, settings)
    assert response.error is None, response.error
    assert response.check.verify.ok and response.check.timing is not None
    seconds = response.check.phase_seconds
    assert seconds["profile_counters"] > 0
    if program == "in_process":
        assert response.profile.program == "in_process" and "profile_ncu" not in seconds
    else:
        assert response.profile.program in program and seconds["profile_ncu"] > 0
    assert [s.kernel for s in response.states] == [k.name for k in response.profile.kernels]
    assert response.states and response.states[0].kernel == "softmax_rowthread"
