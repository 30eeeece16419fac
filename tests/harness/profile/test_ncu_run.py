"""The ncu command line, and how ncu's failures are recognised and explained.

The recorded outputs in ncu_output/ follow ncu 2025.x's wording (its ==PROF==, ==ERROR== and
==WARNING== lines); launch_failed.txt is ncu 2025.3.1's real output on an H100 for a kernel that
writes through a null pointer, and clean.txt its real output for a clean run as an unprivileged
user (that H100 lets anyone read the counters, so ERR_NVGPUCTRPERM could not be captured there);
profiler_busy.txt its real output on an H100 while another process's ncu profiled.
run_ncu itself is exercised with fake `ncu` scripts for the failure modes.
"""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path

import pytest

from kernelblaster.harness.profile.ncu import (
    FULL_SECTIONS,
    QUICK_METRICS,
    QUICK_METRICS_BY_ARCH,
    QUICK_SECTIONS,
    classify_ncu_failure,
    kernel_filter,
    ncu_command,
    run_ncu,
)
from kernelblaster.harness.protocol.profiling_lock import lock_dir
from kernelblaster.settings import Settings
from tests.profiling_holder import another_profile

PROGRAM = ["/work/build/five", "--size", "4096"]
RECORDED = Path(__file__).resolve().parent / "ncu_output"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def recorded(name: str) -> str:
    """ncu's output for one situation, in ncu 2025.x's wording."""
    return (RECORDED / f"{name}.txt").read_text(encoding="utf-8")


def _values(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == flag]


def test_quick_command():
    report = Path("/tmp/out/five")
    command = ncu_command(
        PROGRAM,
        kernels=["transpose_naive", "divergent"],
        depth="quick",
        report_path=report,
        settings=Settings(ncu_path="/opt/nvidia/ncu"),
    )
    assert command[0] == "/opt/nvidia/ncu"
    assert command[-3:] == PROGRAM
    head = " ".join(command[: -len(PROGRAM)])
    for flags in (
        "--target-processes all",
        "--print-units base",
        "--clock-control none",
        "-f -o /tmp/out/five",
        "--kernel-name-base function",
    ):
        assert flags in head
    assert _values(command, "-k") == ["regex:^(.*::)?(transpose_naive|divergent)(<.*>)?$"]
    assert _values(command, "--section") == QUICK_SECTIONS
    assert _values(command, "--metrics") == [",".join(QUICK_METRICS)]
    assert "--import-source" not in command


def test_a_hopper_quick_pass_adds_the_wgmma_tensor_pipe_metrics():
    settings = Settings()
    hopper = ncu_command(
        PROGRAM, kernels=[], depth="quick", report_path=Path("r"), settings=settings, arch="sm_90"
    )
    ampere = ncu_command(
        PROGRAM, kernels=[], depth="quick", report_path=Path("r"), settings=settings, arch="sm_80"
    )
    (hopper_metrics,) = _values(hopper, "--metrics")
    assert hopper_metrics.split(",") == QUICK_METRICS + QUICK_METRICS_BY_ARCH["sm_90"]
    assert any("hgmma" in name for name in QUICK_METRICS_BY_ARCH["sm_90"])
    assert _values(ampere, "--metrics") == [",".join(QUICK_METRICS)]


def test_the_hopper_metrics_are_names_a_real_h100_report_has():
    import ncu_report

    report = ncu_report.load_report(str(FIXTURES / "ncu" / "h100-examples" / "matmul.ncu-rep"))
    names = set(report.range_by_idx(0).action_by_idx(0).metric_names())
    assert set(QUICK_METRICS_BY_ARCH["sm_90"]) <= names


def test_full_command_imports_source_and_takes_every_section():
    command = ncu_command(
        PROGRAM, kernels=[], depth="full", report_path=Path("r"), settings=Settings()
    )
    assert command[0] == "ncu"
    assert _values(command, "--section") == FULL_SECTIONS
    assert set(QUICK_SECTIONS) < set(FULL_SECTIONS)
    assert {"WarpStateStats", "SchedulerStats", "SourceCounters"} <= set(FULL_SECTIONS)
    assert _values(command, "--import-source") == ["yes"]
    assert "-k" not in command and "--metrics" not in command  # no filter: every kernel


def test_empty_program_is_refused():
    with pytest.raises(ValueError, match="empty"):
        ncu_command([], kernels=[], depth="quick", report_path=Path("r"), settings=Settings())


def test_kernel_filter_matches_function_names_only():
    pattern = re.compile(kernel_filter(["softmax", "matmul_v2"]).removeprefix("regex:"))
    for name in ("softmax", "matmul_v2", "ns::softmax", "softmax<float, 4>"):
        assert pattern.fullmatch(name), name
    for name in ("softmax_backward", "my_softmax", "matmul_v"):
        assert not pattern.fullmatch(name), name
    assert kernel_filter(["a.b"]) == r"regex:^(.*::)?(a\.b)(<.*>)?$"


@pytest.mark.parametrize(
    ("output", "returncode", "kind", "needle"),
    [
        (recorded("permission"), 1, "counter_permission", "ERR_NVGPUCTRPERM"),
        (recorded("no_kernels"), 0, "ncu_replay_failed", "launched none matching transpose_naive"),
        (recorded("replay_failed"), 1, "ncu_replay_failed", "Failed to profile"),
        (recorded("device_error"), 1, "ncu_replay_failed", "Unknown Error on device 0"),
        # seen on an H100 while another process's ncu profiled (ncu 2025.3)
        (recorded("profiler_busy"), 9, "profiler_busy", "another profiler held"),
        (recorded("no_gpu"), 1, "no_gpu", "no CUDA GPU"),
        (recorded("no_driver"), 1, "no_driver", "NVIDIA driver"),
        (recorded("launch_failed"), 9, "illegal_memory_access", "faulted while ncu profiled"),
    ],
    ids=[
        "permission",
        "no-kernels",
        "replay",
        "device-error",
        "profiler-busy",
        "no-gpu",
        "no-driver",
        "fault",
    ],
)
def test_recorded_failures_are_named(output, returncode, kind, needle):
    error = classify_ncu_failure(output, returncode, ["transpose_naive"])
    assert error is not None
    assert error.kind == kind
    assert needle in error.message
    assert error.fix
    assert error.log.endswith(output[-200:])


def test_replay_failure_names_the_kernel():
    error = classify_ncu_failure(recorded("replay_failed"), 1, [])
    assert error is not None and error.kernel == "scatter_add"


def test_a_fault_under_ncu_names_the_kernel_and_the_sanitizer():
    error = classify_ncu_failure(recorded("launch_failed"), 9, [])
    assert error is not None and error.kernel == "null_write"
    assert error.message == "Kernel null_write faulted while ncu profiled it (LaunchFailed)."
    assert "kernelblaster check --sanitize" in error.fix


def test_no_kernels_mentions_a_crashed_program():
    error = classify_ncu_failure(recorded("no_kernels"), 3, [])
    assert error is not None
    assert "any kernel" in error.message and "exited with code 3" in error.message


def test_a_clean_run_is_no_failure():
    assert classify_ncu_failure(recorded("clean"), 0, ["transpose_naive"]) is None


def test_permission_fix_says_how():
    error = classify_ncu_failure(recorded("permission"), 1, [])
    assert error is not None
    for step in (
        "root",
        "options nvidia NVreg_RestrictProfilingToAdminUsers=0",
        "/etc/modprobe.d/",
        "modprobe",
        "https://developer.nvidia.com/ERR_NVGPUCTRPERM",
    ):
        assert step in error.fix


def _fake_ncu(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "bin" / "ncu"
    script.parent.mkdir(exist_ok=True)
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _run(tmp_path: Path, ncu: Path | str, **settings):
    return run_ncu(
        ["./five"],
        kernels=["transpose_naive"],
        depth="quick",
        report_path=tmp_path / "five",
        settings=Settings(ncu_path=str(ncu), **settings),
        cwd=tmp_path,
    )


def test_missing_ncu(tmp_path):
    report, error = _run(tmp_path, tmp_path / "no" / "ncu")
    assert report is None and error is not None
    assert error.kind == "ncu_missing"
    assert "ncu_path" in error.fix


def test_missing_ncu_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    report, error = _run(tmp_path, "ncu")
    assert (report, error.kind if error else None) == (None, "ncu_missing")


def test_permission_denied_from_a_real_process(tmp_path):
    stale = tmp_path / "five.ncu-rep"
    stale.write_text("an old report that must not be mistaken for this run's")
    ncu = _fake_ncu(
        tmp_path,
        'echo "$@" > "$(dirname "$0")/argv"\n'
        'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA '
        'GPU Performance Counters on the target device 0." >&2\nexit 1\n',
    )
    report, error = _run(tmp_path, ncu)
    assert report is None and error is not None and error.kind == "counter_permission"
    assert not stale.exists()
    argv = (ncu.parent / "argv").read_text().split()
    assert argv[-1] == "./five" and "--clock-control" in argv


def test_timeout_ends_ncu_and_the_profiled_program(tmp_path):
    # like ncu, the script starts the program as a child that shares its output pipe
    ncu = _fake_ncu(tmp_path, 'echo "==PROF== Connected to process 1"\nsleep 30\necho done\n')
    report, error = _run(tmp_path, ncu, profile_timeout_s=0.5)
    assert report is None and error is not None
    assert error.kind == "timeout"
    assert "0.5 s" in error.message and "profile_timeout_s" in error.fix
    assert "Connected to process" in error.log


def test_a_report_written_around_a_fault_is_not_used(tmp_path):
    # ncu 2025.3 still writes a report after LaunchFailed; its metrics describe a dead kernel
    ncu = _fake_ncu(
        tmp_path,
        f"cat <<'END'\n{recorded('launch_failed')}END\n"
        'touch "$(dirname "$0")/../five.ncu-rep"\nexit 9\n',
    )
    report, error = _run(tmp_path, ncu)
    assert (tmp_path / "five.ncu-rep").is_file()
    assert report is None and error is not None and error.kind == "illegal_memory_access"


def test_no_report_written(tmp_path):
    ncu = _fake_ncu(tmp_path, 'echo "==PROF== Disconnected from process 1"\nexit 0\n')
    report, error = _run(tmp_path, ncu)
    assert report is None and error is not None
    assert error.kind == "crash" and "wrote no report" in error.message


def test_every_gpu_shares_one_ncu_lock(tmp_path, monkeypatch):
    """ncu serializes profiles through $TMPDIR/nsight-compute-lock. Profiles on two GPUs at once
    failed in the driver on an H200 pair, so every GPU's profile, whatever its cache, takes the
    same TMPDIR (the user's, never a stale /tmp lock of another user) and profiles take turns."""
    ncu = _fake_ncu(tmp_path, 'echo "$TMPDIR" >> "$(dirname "$0")/tmpdirs"\nexit 1\n')
    monkeypatch.setenv("TMPDIR", str(tmp_path / "elsewhere"))
    for gpu, cache in ((0, "one"), (1, "two")):
        _run(tmp_path, ncu, gpu_index=gpu, cache_dir=str(tmp_path / cache))
    first, second = (ncu.parent / "tmpdirs").read_text().split()
    assert first == second == str(lock_dir())
    assert Path(first).is_dir()


def test_ncu_waits_for_another_process_s_profile(tmp_path):
    """A profile another process holds (a second server, `kernelblaster optimize`, a worker's
    in-process counters) is waited for, and the wait is said, instead of both failing in the
    driver."""
    ncu = _fake_ncu(tmp_path, 'date +%s.%N > "$(dirname "$0")/started"\nexit 1\n')
    heard: list[tuple[str, str]] = []
    with another_profile(1.0) as holder:
        began = time.time()
        run_ncu(
            ["./five"],
            kernels=["transpose_naive"],
            depth="quick",
            report_path=tmp_path / "five",
            settings=Settings(ncu_path=str(ncu)),
            cwd=tmp_path,
            progress=lambda phase, message: heard.append((phase, message)),
        )
    started = float((ncu.parent / "started").read_text())
    assert started >= began + 1.0  # ncu ran only once the holder let go, a second later
    ((phase, message),) = heard
    assert phase == "profile"
    assert message.startswith(f"waiting for another profile to end (pid {holder})")
