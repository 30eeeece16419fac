"""compute-sanitizer's runs of a built target (harness/check/sanitizer.py: sanitize_target), seen
without a GPU through a stand-in compute-sanitizer script that records its command lines and
answers as the real tool would: which program it runs (the native driver or run_once), on which
inputs (a smaller batch, confirmed at the full size), in folders it makes itself, and what a tool
that can't run means (the kernel is not checked; never a finding against it)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.check import sanitizer
from kernelblaster.harness.native.native_driver import SETUP_FAILED
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.run_once import RunOnceSpec
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings
from tests.harness.recording_ncu import executable_script

# a KernelBench problem at batch_size 512: checked at 32 rows
GEMM = (
    Path(__file__).resolve().parents[3] / "bench/kernelbench/level2/12_Gemm_Multiply_LeakyReLU.py"
)
# what memcheck prints for an out-of-bounds write in k.cu line 1
MEMCHECK_ERROR = (
    "========= Invalid __global__ write of size 4 bytes\n"
    "=========     at k(float *)+0x70 in /src/k.cu:1\n"
)


def recording_sanitizer(folder, body=""):
    """A compute-sanitizer that appends each command line it is given to `argv` and the spec
    it runs (the command's last word, "$spec" in `body`) to `specs`, one per line, then runs
    `body` (sh) and exits 0."""
    return executable_script(
        folder / "compute-sanitizer",
        'here="$(dirname "$0")"\necho "$@" >> "$here/argv"\nfor spec; do :; done\n'
        '[ -f "$spec" ] && { cat "$spec"; echo; } >> "$here/specs"\n' + body + "exit 0\n",
    )


def runs(tool) -> list[str]:
    return sorted((tool.parent / "argv").read_text().splitlines())


def plain(tmp_path, *, shared: bool, reference: str | None = None):
    source = tmp_path / "k.cu"
    body = "__shared__ float s[32]; " if shared else ""
    source.write_text(
        f'__global__ void k(float* x) {{ {body}}}\nextern "C" void launch(float* x) {{}}\n'
    )
    if reference is not None:
        (tmp_path / "k.py").write_text(reference)
    target = Target(
        kind="plain", source=str(source), entry="launch", reference=str(tmp_path / "k.py")
    )
    built = BuildResult(
        ok=True, source=str(source), artifact=str(tmp_path / "libk.so"), arch="sm_90"
    )
    return target, built


def batch_sizes(tool) -> list[int | None]:
    """The batch_size of each run_once spec the tool ran, in order."""
    specs = (tool.parent / "specs").read_text().splitlines()
    return sorted(
        (msgspec.json.decode(spec, type=RunOnceSpec).batch_size for spec in specs),
        key=lambda b: b is None,
    )


def test_a_fresh_cache_gets_its_work_folder_and_both_tools_run(tmp_path):
    """The issue-42 regression: on a machine whose cache does not exist yet, the sanitizer's
    scratch folder is made under cache_dir/work (not a FileNotFoundError in the worker), and
    memcheck and racecheck both run through run_once on a spec of their own."""
    tool = recording_sanitizer(tmp_path / "bin")
    target, built = plain(tmp_path, shared=True)
    cache = tmp_path / "fresh" / "cache"  # nothing of it exists
    settings = Settings(compute_sanitizer_path=str(tool), cache_dir=str(cache))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert (findings, error) == ([], None)
    assert run.status == "passed" and run.tools == ["memcheck", "racecheck"]
    assert (cache / "work").is_dir()
    assert [r.split()[1] for r in runs(tool)] == ["memcheck", "racecheck"]
    assert all("kernelblaster.harness.target.run_once" in r for r in runs(tool))
    assert run.summary.startswith("compute-sanitizer memcheck, racecheck passed on")


def test_a_plain_target_is_sanitized_through_the_native_driver_when_asked(tmp_path, monkeypatch):
    """With native_sanitizer_driver, memcheck and racecheck run the driver's command (its
    executable and the call's spec), not run_once's Python; without it, run_once."""
    tool = recording_sanitizer(tmp_path / "bin")
    monkeypatch.setattr(
        sanitizer, "driver_command", lambda *a, **k: (["/drv/driver", "/drv/spec"], "")
    )
    target, built = plain(tmp_path, shared=True)
    cache = str(tmp_path / "cache")
    on = Settings(compute_sanitizer_path=str(tool), native_sanitizer_driver=True, cache_dir=cache)
    findings, run, error = sanitizer.sanitize_target(target, built, on)
    assert (findings, run.status, error) == ([], "passed", None)
    assert [r.split()[1] for r in runs(tool)] == ["memcheck", "racecheck"]
    assert all(r.endswith("/drv/driver /drv/spec") for r in runs(tool))

    (tool.parent / "argv").unlink()
    off = Settings(compute_sanitizer_path=str(tool), native_sanitizer_driver=False, cache_dir=cache)
    assert sanitizer.sanitize_target(target, built, off)[0::2] == ([], None)
    assert all("kernelblaster.harness.target.run_once" in r for r in runs(tool)), runs(tool)


def test_a_driver_that_cannot_set_the_call_up_leaves_the_sanitizer_to_run_once(
    tmp_path, monkeypatch, caplog
):
    """The driver's own setup failure (its line, exit 2) is not the kernel's: that run is
    done again through run_once, and what run_once's run finds is the result."""
    refuse = f'case "$*" in *drv/driver*) echo "{SETUP_FAILED} no CUDA device" >&2; exit 2;; esac\n'
    tool = recording_sanitizer(tmp_path / "bin", refuse)
    monkeypatch.setattr(
        sanitizer, "driver_command", lambda *a, **k: (["/drv/driver", "/drv/spec"], "")
    )
    target, built = plain(tmp_path, shared=False)
    settings = Settings(
        compute_sanitizer_path=str(tool),
        native_sanitizer_driver=True,
        cache_dir=str(tmp_path / "cache"),
    )
    with caplog.at_level("WARNING"):
        findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert (findings, run.status, error) == ([], "passed", None)
    # runs() sorts its lines, and where the checkout lies decides which comes first.
    driven = [r for r in runs(tool) if r.endswith("/drv/driver /drv/spec")]
    once = [r for r in runs(tool) if "kernelblaster.harness.target.run_once" in r]
    assert (len(driven), len(once)) == (1, 1), runs(tool)
    assert "through run_once: no CUDA device" in caplog.text


def test_a_sanitizer_that_cannot_start_leaves_the_kernel_not_checked(tmp_path):
    """compute_sanitizer_path naming no program: the kernel is not checked (status not_run,
    with why and the fix), and that is an error of the run (sanitizer_missing), never a
    finding against the kernel."""
    target, built = plain(tmp_path, shared=True)
    missing = tmp_path / "no" / "compute-sanitizer"
    settings = Settings(compute_sanitizer_path=str(missing), cache_dir=str(tmp_path / "c"))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert findings == []
    assert error is not None and error.kind == "sanitizer_missing"
    assert str(missing) in error.message and "compute_sanitizer_path" in error.fix
    assert run.status == "not_run" and run.reason == error.message and run.fix == error.fix
    assert run.summary.startswith("not checked for memory errors: compute-sanitizer could not")


def test_a_sanitizer_that_ends_without_a_report_is_no_verdict(tmp_path):
    """A tool that exits with a status of its own (not --error-exitcode's) and reports nothing
    has no verdict on the kernel: sanitizer_failed, with its output as the log."""
    tool = recording_sanitizer(tmp_path / "bin", 'echo "cannot open the device" >&2; exit 7\n')
    target, built = plain(tmp_path, shared=False)
    settings = Settings(compute_sanitizer_path=str(tool), cache_dir=str(tmp_path / "c"))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert findings == [] and run.status == "not_run"
    assert error is not None and error.kind == "sanitizer_failed"
    assert "exit 7" in error.message and "cannot open the device" in error.log


def test_errors_reported_in_an_unknown_form_are_still_a_finding(tmp_path):
    """--error-exitcode's status means the tool found errors, even in lines the parser does
    not know: a finding (status failed), never a pass."""
    body = 'echo "========= Program hit cudaErrorLaunchFailure on CUDA API call"\nexit 86\n'
    tool = recording_sanitizer(tmp_path / "bin", body)
    target, built = plain(tmp_path, shared=False)
    settings = Settings(compute_sanitizer_path=str(tool), cache_dir=str(tmp_path / "c"))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert error is None and run.status == "failed"
    (finding,) = findings
    assert finding.kind == "memcheck" and "cudaErrorLaunchFailure" in finding.message


def test_a_file_in_the_way_of_the_cache_is_one_setup_error(tmp_path):
    """cache_dir's parent is a file: no scratch folder can be made; one setup_path error that
    names the file, and the kernel is not checked (never a finding)."""
    tool = recording_sanitizer(tmp_path / "bin")
    (tmp_path / "blocker").write_text("a file, not a folder")
    target, built = plain(tmp_path, shared=False)
    settings = Settings(
        compute_sanitizer_path=str(tool), cache_dir=str(tmp_path / "blocker" / "cache")
    )
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert findings == [] and run.status == "not_run"
    assert error is not None and error.kind == "setup_path"
    assert f"{tmp_path / 'blocker'} is a file" in error.message
    assert error.fix.startswith(f"Remove {tmp_path / 'blocker'}") and "cache_dir" in error.fix
    assert not (tool.parent / "argv").exists()  # nothing ran


@pytest.mark.parametrize("found_at_full_size", [False, True])
def test_a_smaller_batch_is_checked_and_its_findings_confirmed_at_full_size(
    tmp_path, found_at_full_size
):
    """A KernelBench-style reference at batch_size 512: both tools run on get_inputs() at
    batch_size 32 (run_once's spec says so). A finding there is checked again at the full
    size: one seen there too fails the kernel; one seen only at 32 rows does not (the kernel
    was verified at get_inputs()' own size), and the result says what the smaller run saw."""
    only_small = "" if found_at_full_size else 'grep -q \'"batch_size":32\' "$spec" && '
    body = f"{only_small}{{ printf '{MEMCHECK_ERROR}'; exit 86; }}\n"
    tool = recording_sanitizer(tmp_path / "bin", body)
    target, built = plain(tmp_path, shared=False, reference=GEMM.read_text())
    settings = Settings(compute_sanitizer_path=str(tool), cache_dir=str(tmp_path / "c"))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert error is None
    assert batch_sizes(tool) == [32, None]  # the smaller run, then the confirmation at full size
    if found_at_full_size:
        assert run.status == "failed" and findings and findings[0].line == 1
        assert "Invalid __global__ write of size 4 bytes in k (line 1)" in run.reason
    else:
        assert run.status == "passed" and findings == []
        assert run.inputs.startswith("get_inputs() as written (at batch_size 32 it reported")


def test_a_clean_smaller_batch_is_the_verdict_and_says_its_size(tmp_path):
    tool = recording_sanitizer(tmp_path / "bin")
    target, built = plain(tmp_path, shared=False, reference=GEMM.read_text())
    settings = Settings(compute_sanitizer_path=str(tool), cache_dir=str(tmp_path / "c"))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert (findings, error, run.status) == ([], None, "passed")
    assert run.inputs == "get_inputs() at batch_size 32 instead of 512"
    assert batch_sizes(tool) == [32]
    assert run.seconds > 0


def test_a_finding_is_the_verdict_even_when_the_other_tool_could_not_run(tmp_path):
    """memcheck finds an out-of-bounds write while racecheck can't run: the finding fails the
    kernel (a tool that did not run never turns a found error into "not checked"); the result
    says which tool ran, and the error of the other is reported too."""
    body = f"case \"$*\" in *racecheck*) exit 7;; esac\nprintf '{MEMCHECK_ERROR}'; exit 86\n"
    tool = recording_sanitizer(tmp_path / "bin", body)
    target, built = plain(tmp_path, shared=True)
    settings = Settings(compute_sanitizer_path=str(tool), cache_dir=str(tmp_path / "c"))
    findings, run, error = sanitizer.sanitize_target(target, built, settings)
    assert run.status == "failed" and run.tools == ["memcheck"] and run.fix == ""
    assert [f.kind for f in findings] == ["memcheck"]
    assert error is not None and error.kind == "sanitizer_failed" and "racecheck" in error.message
