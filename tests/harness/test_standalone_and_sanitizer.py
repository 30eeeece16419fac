"""Golden-output comparison for standalone programs, and compute-sanitizer report parsing."""

from kernelblaster.harness.check.sanitizer import parse_report
from kernelblaster.harness.check.standalone import compare_output

GOLDEN = "checksum 8384202.307990\nsamples 1.000000 1.002000 2.998000 1.606000\n"


def test_golden_output_matches_within_tolerance():
    printed = "checksum 8384202.31\nsamples 1.0 1.002 2.998 1.606\n"
    assert compare_output(printed, GOLDEN).ok


def test_a_wrong_number_is_reported_with_its_position():
    result = compare_output(GOLDEN.replace("2.998000", "3.5"), GOLDEN)
    assert not result.ok
    assert result.mismatches[0].first_bad_index == [5]
    assert "expected 2.998 got 3.5" in result.message


def test_changed_text_or_token_count_fails():
    assert "token 0" in compare_output(GOLDEN.replace("checksum", "sum"), GOLDEN).message
    assert not compare_output("checksum 8384202.307990\n", GOLDEN).ok


MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at relu_k(const float *, float *, int)+0x90 in /work/tests/out_of_bounds.cu:4
=========     by thread (0,0,0) in block (256,0,0)
=========     Address 0x7f2a00040000 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""

RACECHECK = (
    "========= COMPUTE-SANITIZER\n"
    "========= Error: Race reported between Write access at relu_k(const float *, float *, int)"
    "+0x80 in /w/shared_race.cu:5\n"
    "=========     and Read access at relu_k(const float *, float *, int)+0xa0 in "
    "/w/shared_race.cu:7 [1024 hazards]\n"
)
_RACE_TAIL = """=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
RACECHECK += _RACE_TAIL


def test_memcheck_error_names_kernel_and_line():
    (finding,) = parse_report(MEMCHECK, tool="memcheck", source="/any/where/out_of_bounds.cu")
    assert finding.kind == "memcheck"
    assert finding.line == 4
    assert finding.message == "Invalid __global__ write of size 4 bytes in relu_k"


def test_memcheck_line_only_for_the_users_file():
    (finding,) = parse_report(MEMCHECK, tool="memcheck", source="other.cu")
    assert finding.line is None


def test_racecheck_hazard():
    (finding,) = parse_report(RACECHECK, tool="racecheck", source="shared_race.cu")
    assert finding.kind == "racecheck" and finding.line == 5


def test_clean_report_has_no_findings():
    assert parse_report("========= ERROR SUMMARY: 0 errors\n", tool="memcheck", source="x.cu") == []


def _recording_sanitizer(folder, body=""):
    """A compute-sanitizer that appends each command line it is given to `argv` (one per
    line), then runs `body` (sh) and exits 0."""
    from recording_ncu import executable_script

    return executable_script(
        folder / "compute-sanitizer", f'echo "$@" >> "$(dirname "$0")/argv"\n{body}exit 0\n'
    )


def _plain(tmp_path, shared: bool):
    from kernelblaster.harness.protocol.records import BuildResult
    from kernelblaster.harness.target.targets import Target

    source = tmp_path / "k.cu"
    body = "__shared__ float s[32]; " if shared else ""
    source.write_text(
        f'__global__ void k(float* x) {{ {body}}}\nextern "C" void launch(float* x) {{}}\n'
    )
    target = Target(
        kind="plain", source=str(source), entry="launch", reference=str(tmp_path / "k.py")
    )
    built = BuildResult(
        ok=True, source=str(source), artifact=str(tmp_path / "libk.so"), arch="sm_90"
    )
    return target, built


def test_a_plain_target_is_sanitized_through_the_native_driver_when_asked(tmp_path, monkeypatch):
    """With native_sanitizer_driver, memcheck and racecheck run the driver's command (its
    executable and the call's spec), not run_once's Python; without it, run_once."""
    from kernelblaster.harness.check import sanitizer
    from kernelblaster.settings import Settings

    tool = _recording_sanitizer(tmp_path / "bin")
    monkeypatch.setattr(sanitizer, "driver_command", lambda *a: (["/drv/driver", "/drv/spec"], ""))
    target, built = _plain(tmp_path, shared=True)
    on = Settings(compute_sanitizer_path=str(tool), native_sanitizer_driver=True)
    assert sanitizer.sanitize_target(target, built, on, tmp_path) == ([], None)
    runs = (tool.parent / "argv").read_text().splitlines()
    assert [r.split()[1] for r in runs] == ["memcheck", "racecheck"]
    assert all(r.endswith("/drv/driver /drv/spec") for r in runs)

    (tool.parent / "argv").unlink()
    off = Settings(compute_sanitizer_path=str(tool), native_sanitizer_driver=False)
    assert sanitizer.sanitize_target(target, built, off, tmp_path) == ([], None)
    runs = (tool.parent / "argv").read_text().splitlines()
    assert all("kernelblaster.harness.target.run_once" in r for r in runs), runs


def test_a_driver_that_cannot_set_the_call_up_leaves_the_sanitizer_to_run_once(
    tmp_path, monkeypatch, caplog
):
    """The driver's own setup failure (its line, exit 2) is not the kernel's: that run is
    done again through run_once, and what run_once's run finds is the result."""
    from kernelblaster.harness.check import sanitizer
    from kernelblaster.harness.native.native_driver import SETUP_FAILED
    from kernelblaster.settings import Settings

    refuse = f'case "$*" in *drv/driver*) echo "{SETUP_FAILED} no CUDA device" >&2; exit 2;; esac\n'
    tool = _recording_sanitizer(tmp_path / "bin", refuse)
    monkeypatch.setattr(sanitizer, "driver_command", lambda *a: (["/drv/driver", "/drv/spec"], ""))
    target, built = _plain(tmp_path, shared=False)
    settings = Settings(compute_sanitizer_path=str(tool), native_sanitizer_driver=True)
    with caplog.at_level("WARNING"):
        assert sanitizer.sanitize_target(target, built, settings, tmp_path) == ([], None)
    first, second = (tool.parent / "argv").read_text().splitlines()
    assert first.endswith("/drv/driver /drv/spec")
    assert "kernelblaster.harness.target.run_once" in second
    assert "through run_once: no CUDA device" in caplog.text
