"""Run Nsight Compute (`ncu`) on a program and say clearly why it failed when it does.

Two depths, by `--section`: quick on every save (what the classifier needs to name a bottleneck,
plus QUICK_METRICS), full on request and before optimizing (with the hierarchical roofline's L1
and L2 bytes: ncu_metrics.CACHE_ROOFLINE). Every run uses `--clock-control none` so times match
un-profiled runs, and `--target-processes all` (a Python launcher may start the kernels in a
child)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.protocol.processes import run_tool
from kernelblaster.harness.protocol.profiling_lock import (
    lock_dir,
    one_profile_at_a_time,
    profiler_busy,
)
from kernelblaster.harness.protocol.records import HarnessError, ProfileDepth
from kernelblaster.harness.protocol.setup_errors import COUNTER_PERMISSION_FIX
from kernelblaster.settings import Settings

QUICK_SECTIONS: list[str] = [
    "SpeedOfLight",
    "LaunchStats",
    "Occupancy",
    "WarpStateStats",
    "SchedulerStats",
    # Source-level counters give the per-line markers (uncoalesced accesses, stall hot spots)
    # that become line diagnostics on every save: worth their extra replay passes.
    "SourceCounters",
]

# Pipe utilizations, bytes per global sector and shared-memory bank conflicts, so the commonest
# findings need no full pass. Only metrics every GPU since Volta has: ncu refuses the whole run
# over one unknown metric (QUICK_METRICS_BY_ARCH adds an architecture's own).
QUICK_METRICS: list[str] = [
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
]

QUICK_METRICS_BY_ARCH: dict[str, list[str]] = {"sm_90": list(m.TENSOR_PIPES[1:])}

FULL_SECTIONS: list[str] = [
    *QUICK_SECTIONS,
    "ComputeWorkloadAnalysis",
    "InstructionStats",
    "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Chart",
    "MemoryWorkloadAnalysis_Tables",
    "SpeedOfLight_RooflineChart",
    "SpeedOfLight_HierarchicalTensorRooflineChart",
    "WorkloadDistribution",
]

# What ncu (or the CUDA runtime under it) prints for each failure, most specific first.
_NO_DRIVER = re.compile(
    r"libcuda\.so[^\n]*(cannot open|not found)|CUDA driver version is insufficient|"
    r"cudaErrorInsufficientDriver|CUDA_ERROR_NO_DRIVER|no NVIDIA driver|"
    r"NVIDIA driver (is not loaded|on your system is too old)",
    re.IGNORECASE,
)
_NO_GPU = re.compile(
    r"no CUDA-capable device|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|"
    r"no supported (GPU|device)s?|No devices? (were )?found",
    re.IGNORECASE,
)
# another profiler (or DCGM) held the counters: the driver's words, ncu 2025.3
_PROFILER_BUSY = re.compile(
    r"driver resource was unavailable|concurrently collecting profiling data", re.IGNORECASE
)
_REPLAY_FAILED = re.compile(
    r"==ERROR== (Failed to profile[^\n]*|Failed to prepare kernel[^\n]*|"
    r"An error was reported by the driver[^\n]*|Unknown Error on device[^\n]*|"
    r"[^\n]*replay[^\n]*)",
    re.IGNORECASE,
)
# The kernel itself faulted while ncu ran it (ncu 2025.3 prints a bare `==ERROR== LaunchFailed`).
_KERNEL_FAULT = re.compile(
    r"==ERROR== (LaunchFailed[^\n]*|[^\n]*(illegal memory access|misaligned address|"
    r"unspecified launch failure|illegal instruction)[^\n]*)",
    re.IGNORECASE,
)
_PROFILING_KERNEL = re.compile(r'==PROF== Profiling "([A-Za-z_][\w:<>]*)')
_FAILED_KERNEL = re.compile(r'Failed to profile "?([A-Za-z_][\w:<>]*)')
_NO_KERNELS = re.compile(r"No kernels were profiled", re.IGNORECASE)

_LOG_TAIL = 4000


def kernel_filter(kernels: list[str]) -> str:
    """ncu's `-k` value matching exactly these kernels by function name.

    ncu matches `--kernel-name-base function`: the name without return type or parameters.
    Namespaced (`ns::k`) and template (`k<float>`) spellings of the same kernel also match."""
    names = "|".join(re.escape(name) for name in kernels)
    return f"regex:^(.*::)?({names})(<.*>)?$"


def ncu_command(
    program: list[str],
    *,
    kernels: list[str],
    depth: ProfileDepth,
    report_path: Path,
    settings: Settings,
    arch: str | None = None,
) -> list[str]:
    """The ncu command line that profiles `program` into `report_path` (.ncu-rep added by ncu
    when missing). `kernels` empty profiles every kernel the program launches; `arch` (the
    GPU's, e.g. "sm_90") adds that architecture's quick metrics."""
    if not program:
        raise ValueError("ncu_command: the program to profile is empty")
    command = [
        settings.ncu_path,
        "--target-processes",
        "all",
        "--print-units",
        "base",
        "--clock-control",
        "none",
        "-f",
        "-o",
        str(report_path),
    ]
    if kernels:
        command += ["--kernel-name-base", "function", "-k", kernel_filter(kernels)]
    for section in FULL_SECTIONS if depth == "full" else QUICK_SECTIONS:
        command += ["--section", section]
    if depth == "full":
        command += ["--import-source", "yes"]
    else:
        metrics = QUICK_METRICS + QUICK_METRICS_BY_ARCH.get(arch or "", [])
        command += ["--metrics", ",".join(metrics)]
    return [*command, *program]


def _report_file(report_path: Path) -> Path:
    """Where ncu writes the report: it appends .ncu-rep unless the name already ends with it."""
    if report_path.suffix == ".ncu-rep":
        return report_path
    return report_path.with_name(report_path.name + ".ncu-rep")


def classify_ncu_failure(output: str, returncode: int, kernels: list[str]) -> HarnessError | None:
    """The failure ncu's combined stdout/stderr describes, or None when it reports none."""
    log = output[-_LOG_TAIL:]
    if "ERR_NVGPUCTRPERM" in output:
        return HarnessError(
            kind="counter_permission",
            message="ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): "
            "profiling is restricted to administrators on this machine.",
            fix=COUNTER_PERMISSION_FIX,
            log=log,
        )
    if _NO_DRIVER.search(output):
        return HarnessError(
            kind="no_driver",
            message="ncu could not use the NVIDIA driver: it is missing or too old.",
            fix="Install or update the NVIDIA driver for your GPU (nvidia-smi must work), "
            "then profile again.",
            log=log,
        )
    if _NO_GPU.search(output):
        return HarnessError(
            kind="no_gpu",
            message="ncu found no CUDA GPU to profile on.",
            fix="Profile on a machine with an NVIDIA GPU; check that nvidia-smi lists it and "
            "that CUDA_VISIBLE_DEVICES does not hide it.",
            log=log,
        )
    if fault := _KERNEL_FAULT.search(output):
        # the kernel being profiled when the fault came is the last one ncu announced before it
        profiled = _PROFILING_KERNEL.findall(output[: fault.start()])
        kernel = profiled[-1] if profiled else None
        where = f"Kernel {kernel}" if kernel else "A kernel"
        return HarnessError(
            kind="illegal_memory_access",
            message=f"{where} faulted while ncu profiled it ({fault.group(1).strip()}).",
            fix="It passed its check, so the fault depends on the run: an out-of-bounds access "
            "that only some launches make, or a dependence on state the kernel changes itself "
            "(ncu replays each kernel many times). Run `kernelblaster check --sanitize` to find "
            "the line.",
            kernel=kernel,
            log=log,
        )
    if _PROFILER_BUSY.search(output):
        return profiler_busy("ncu could not profile the kernel", log)
    if replay := _REPLAY_FAILED.search(output):
        failed = _FAILED_KERNEL.search(output)
        return HarnessError(
            kind="ncu_replay_failed",
            message=f"ncu could not replay the kernel: {replay.group(1).strip()}",
            fix="Kernel replay re-runs the kernel many times: it must not depend on state it "
            "changes itself (e.g. in-place updates, atomics into its own input), and must run "
            "correctly on its own (try compute-sanitizer). Profiling with "
            "`--replay-mode application` avoids in-place problems.",
            kernel=failed.group(1) if failed else None,
            log=log,
        )
    if _NO_KERNELS.search(output):
        wanted = ", ".join(kernels) if kernels else "any kernel"
        crashed = f" The program exited with code {returncode}." if returncode else ""
        return HarnessError(
            kind="ncu_replay_failed",
            message=f"ncu profiled no kernels: the program launched none matching {wanted}."
            + crashed,
            fix="Check that the program runs on its own and launches the kernel; ncu matches "
            "kernel function names without parameters (e.g. `softmax`, not `softmax(float*)`).",
            log=log,
        )
    return None


# ncu's own lines, in the order a run prints them, and the phase each one ends (NcuClock)
_MILESTONES: list[tuple[str, str]] = [
    ("==PROF== Connected to process", "ncu_to_connected"),
    ("==PROF== Profiling ", "ncu_to_first_kernel"),
    ("==PROF== Disconnected from process", "ncu_kernels"),
]


class NcuClock:
    """Where an ncu run's wall time goes, timed by when its own lines arrive (`_MILESTONES`): start
    until connected, the target's work before its first kernel, the kernels' replay passes, and
    ncu's exit. A line that never came leaves its phase out; its time is in the next one."""

    def __init__(self) -> None:
        self._began = time.perf_counter()
        self._heard = ""
        self._at: dict[str, float] = {}

    def heard(self, text: str) -> None:
        self._heard = (self._heard + text)[-4096:]  # a line split across two pieces is seen
        for marker, phase in _MILESTONES:
            if phase not in self._at and marker in self._heard:
                self._at[phase] = time.perf_counter()

    def seconds(self) -> dict[str, float]:
        """The phases seen, each its own seconds; `ncu_exit` up to now."""
        split: dict[str, float] = {}
        last = self._began
        for _, phase in _MILESTONES:
            if phase in self._at:
                split[phase] = round(self._at[phase] - last, 4)
                last = self._at[phase]
        split["ncu_exit"] = round(time.perf_counter() - last, 4)
        return split


def run_ncu(
    program: list[str],
    *,
    kernels: list[str],
    depth: ProfileDepth,
    report_path: Path,
    settings: Settings,
    cwd: Path | None = None,
    env: dict | None = None,
    arch: str | None = None,
    progress: Callable[..., None] | None = None,
    seconds: dict[str, float] | None = None,
) -> tuple[Path | None, HarnessError | None]:
    """Profile `program` with ncu, once no other profile of ours runs (`progress` hears of a
    wait). Returns the written report, or the reason there is none. `seconds`, when given,
    gets the wait for the profiling lock (`ncu_lock_wait`) and ncu's run split by NcuClock."""
    command = ncu_command(
        program, kernels=kernels, depth=depth, report_path=report_path, settings=settings, arch=arch
    )
    if shutil.which(settings.ncu_path) is None:
        return None, _ncu_missing(settings.ncu_path)
    report = _report_file(report_path)
    report.unlink(missing_ok=True)  # a stale report must never pass for this run's
    # ncu serializes the profiles on the machine through $TMPDIR/nsight-compute-lock: ours is
    # never a lock file another user left in /tmp.
    env = {**(env or {}), "TMPDIR": str(lock_dir())}
    waited = time.perf_counter()
    try:
        # The profiled program is ncu's child: a timeout ends it too.
        with one_profile_at_a_time(progress):
            clock = NcuClock()
            if seconds is not None:
                seconds["ncu_lock_wait"] = round(time.perf_counter() - waited, 4)
            try:
                done = run_tool(
                    command,
                    cwd=cwd,
                    env={**os.environ, **env},
                    timeout=settings.profile_timeout_s,
                    on_output=clock.heard,
                )
            finally:
                if seconds is not None:
                    seconds.update(clock.seconds())
    except FileNotFoundError:
        return None, _ncu_missing(settings.ncu_path)
    except subprocess.TimeoutExpired as exc:
        partial = exc.output if isinstance(exc.output, str) else ""
        return None, HarnessError(
            kind="timeout",
            message=f"ncu did not finish within {settings.profile_timeout_s:g} s.",
            fix="Profile fewer kernels or launches, use the quick depth, or raise "
            "profile_timeout_s (profileTimeoutS in the editor settings).",
            log=partial[-_LOG_TAIL:],
        )
    returncode, output = done.returncode, done.stdout
    failure = classify_ncu_failure(output, returncode, kernels)
    if failure is not None:
        return None, failure
    if not report.is_file():
        return None, HarnessError(
            kind="crash",
            message=f"ncu exited with code {returncode} and wrote no report.",
            fix="Run the command in the log by hand to see what went wrong.",
            log=output[-_LOG_TAIL:],
        )
    return report, None


def _ncu_missing(ncu_path: str) -> HarnessError:
    return HarnessError(
        kind="ncu_missing",
        message=f"Nsight Compute (ncu) was not found: {ncu_path!r} is not an executable on PATH.",
        fix="Install Nsight Compute (it ships with the CUDA toolkit, in <cuda>/bin), put it on "
        "PATH, or set ncu_path (ncuPath in the editor settings) to the ncu executable.",
    )
