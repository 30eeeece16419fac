"""Golden-output comparison for standalone programs, and compute-sanitizer report parsing (its
runs: test_sanitizer_runs.py)."""

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
