"""Where an ncu run's seconds go: run_ncu splits its wall time by when ncu's own lines arrive
(connected, the first kernel's profiling begun, disconnected), and profile_target adds the
program's set-up before it and the report's reading after it. Real processes: a stand-in ncu
script that prints ncu 2025.3's lines with pauses between them and writes a real H100 report;
the split's lower bounds are its pauses."""

from __future__ import annotations

import itertools
import shutil
import stat
from pathlib import Path

from kernelblaster.harness.profile.ncu import run_ncu
from kernelblaster.harness.profile.profile import profile_target
from kernelblaster.harness.protocol.processes import run_tool
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ncu" / "h100-examples"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PHASES = ("ncu_to_connected", "ncu_to_first_kernel", "ncu_kernels", "ncu_exit")


def paced_ncu(folder: Path) -> Path:
    """An ncu that connects, pauses 0.3 s (the target's own start), starts the first kernel's
    line and pauses 0.4 s inside it (its replay passes), disconnects, pauses 0.2 s (the report
    written), then writes the real relu report where -o says."""
    script = folder / "ncu"
    folder.mkdir(parents=True, exist_ok=True)
    script.write_text(
        "#!/bin/sh\n"
        'out=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'case "$out" in *.ncu-rep) ;; *) out="$out.ncu-rep";; esac\n'
        'echo "==PROF== Connected to process 4242 (/usr/bin/python3)"\n'
        "sleep 0.3\n"
        "printf '==PROF== Profiling \"relu_naive\" - 0: 0%%....50%%'\n"
        "sleep 0.4\n"
        "echo '....100% - 9 passes'\n"
        'echo "==PROF== Disconnected from process 4242"\n'
        "sleep 0.2\n"
        f'cp "{FIXTURES / "relu.ncu-rep"}" "$out"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_run_ncu_splits_its_time_by_ncu_s_own_lines(tmp_path):
    seconds: dict[str, float] = {}
    report, error = run_ncu(
        ["./relu"],
        kernels=["relu_naive"],
        depth="quick",
        report_path=tmp_path / "relu",
        settings=Settings(ncu_path=str(paced_ncu(tmp_path / "bin"))),
        cwd=tmp_path,
        seconds=seconds,
    )
    assert error is None and report == tmp_path / "relu.ncu-rep" and report.is_file()
    assert set(seconds) == {"ncu_lock_wait", *PHASES}
    _assert_paced(seconds)


def _assert_paced(seconds: dict[str, float]) -> None:
    """The phases of paced_ncu's run. A line is timed when it is read, never before it was
    written, but on a loaded machine it may be read late, moving time from one phase to the
    next: each phase's end, counted from ncu's start, is bounded below by the pauses before
    its line; the phases themselves are bounded only loosely."""
    ends = dict(zip(PHASES, itertools.accumulate(seconds[p] for p in PHASES), strict=True))
    assert ends["ncu_to_first_kernel"] >= 0.3
    assert ends["ncu_kernels"] >= 0.7
    assert ends["ncu_exit"] >= 0.9
    # the first kernel's line is heard when it begins, not when its passes end (0.4 s later)
    assert seconds["ncu_kernels"] >= 0.2


def test_a_run_that_never_connected_keeps_its_time_in_ncu_exit(tmp_path):
    script = tmp_path / "bin" / "ncu"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nsleep 0.2\necho '==ERROR== no CUDA-capable device'\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    seconds: dict[str, float] = {}
    _, error = run_ncu(
        ["./relu"],
        kernels=[],
        depth="quick",
        report_path=tmp_path / "relu",
        settings=Settings(ncu_path=str(script)),
        seconds=seconds,
    )
    assert error is not None and error.kind == "no_gpu"  # the output is still read whole
    assert set(seconds) == {"ncu_lock_wait", "ncu_exit"} and seconds["ncu_exit"] >= 0.2


def test_run_tool_hears_a_line_before_its_end_and_returns_the_whole_output(tmp_path):
    heard: list[str] = []
    done = run_tool(
        ["sh", "-c", "printf 'begun'; sleep 0.3; echo ' ended'; echo oops >&2; exit 3"],
        timeout=10,
        on_output=heard.append,
    )
    assert done.returncode == 3 and done.stdout == "begun ended\noops\n"
    assert heard[0] == "begun"  # delivered while the tool slept, before the line's end
    assert "".join(heard) == done.stdout


def test_profile_target_says_where_the_profile_s_seconds_went(tmp_path):
    for suffix in (".cu", ".py"):
        shutil.copy(EXAMPLES / f"relu{suffix}", tmp_path / f"relu{suffix}")
    settings = Settings(
        ncu_path=str(paced_ncu(tmp_path / "bin")),
        cache_dir=str(tmp_path / "cache"),
        native_profile_driver=False,  # run_once: its spec is written without a GPU
    )
    target = resolve_target(tmp_path / "relu.cu", settings)
    assert isinstance(target, Target), target
    built = BuildResult(
        ok=True, source=target.source, artifact=str(tmp_path / "build" / "relu.so"), arch="sm_90"
    )
    report, error = profile_target(target, built, settings, depth="quick")
    assert error is None and report is not None and report.program == "run_once"
    assert [kernel.name for kernel in report.kernels] == ["relu_naive"]
    seconds = report.phase_seconds
    assert {"ncu_prepare", "ncu_lock_wait", *PHASES, "ncu_read"} <= set(seconds)
    _assert_paced(seconds)
    # the parts are within the profile's wall time
    assert sum(seconds.values()) <= report.seconds + 1e-3
