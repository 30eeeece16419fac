"""`kernelblaster optimize`'s words (agents/optimize_cli.py): the offered candidate's memory
check, passed or not run (why and the fix: the candidate is offered all the same), and every
faster candidate not adopted, with why. Never silent (issue 42)."""

from __future__ import annotations

from kernelblaster.agents.optimize_cli import _print_result
from kernelblaster.harness.protocol.optimize_protocol import OptimizeResult, PassedOver
from kernelblaster.harness.protocol.records import SanitizerRun

ORIGINAL = "__global__ void k(float* x) { x[0] = 1.0f; }\n"
BETTER = "__global__ void k(float* x) { if (threadIdx.x == 0) x[0] = 1.0f; }\n"
PASSED = SanitizerRun(
    status="passed", tools=["memcheck"], inputs="get_inputs() at batch_size 32 instead of 512",
    seconds=2.5,
)  # fmt: skip
NOT_RUN = SanitizerRun(
    status="not_run",
    reason="compute-sanitizer could not be started (compute-sanitizer: No such file).",
    fix="Install the CUDA toolkit's compute-sanitizer.",
)
FASTER = PassedOver(
    rollout=0, depth=1, technique="vectorize_loads", time_ms=0.1, speedup=10.0,
    reason="compute-sanitizer memcheck found Invalid __global__ write of size 4 bytes",
)  # fmt: skip


def improved(sanitizer: SanitizerRun | None, **fields) -> OptimizeResult:
    return OptimizeResult(
        kernel="k", improved=True, best_source=BETTER, speedup=30.27, best_time_ms=0.033,
        original_time_ms=1.0, techniques=["coalesce_global_access"], sanitizer=sanitizer,
        **fields,
    )  # fmt: skip


def test_a_checked_candidate_says_what_the_sanitizer_checked(tmp_path, capsys):
    source = tmp_path / "k.cu"
    source.write_text(ORIGINAL)
    _print_result(improved(PASSED), ORIGINAL, source, apply=False)
    out = capsys.readouterr().out
    assert "best: 30.27x vs the original via coalesce_global_access" in out
    assert (
        "memory: compute-sanitizer memcheck passed on get_inputs() at batch_size 32 instead "
        "of 512 (2.5 s)" in out
    )
    assert "warning" not in out and (tmp_path / "k.optimized.cu").read_text() == BETTER


def test_an_unchecked_candidate_is_written_with_a_warning_and_its_fix(tmp_path, capsys):
    source = tmp_path / "k.cu"
    source.write_text(ORIGINAL)
    _print_result(improved(NOT_RUN, passed_over=[FASTER]), ORIGINAL, source, apply=False)
    out = capsys.readouterr().out
    assert f"warning: not checked for memory errors: {NOT_RUN.reason} {NOT_RUN.fix}" in out
    assert f"passed over: {FASTER.summary}" in out
    assert (tmp_path / "k.optimized.cu").read_text() == BETTER


def test_no_candidate_adopted_says_which_faster_ones_were_dropped(tmp_path, capsys):
    source = tmp_path / "k.cu"
    source.write_text(ORIGINAL)
    result = OptimizeResult(kernel="k", passed_over=[FASTER])
    _print_result(result, ORIGINAL, source, apply=False)
    out = capsys.readouterr().out
    assert out.splitlines()[-2:] == [
        "passed over: 10.00x candidate of rollout 1 step 2 (vectorize_loads) not adopted: "
        "compute-sanitizer memcheck found Invalid __global__ write of size 4 bytes",
        "no verified candidate beat the original",
    ]
    assert not (tmp_path / "k.optimized.cu").exists()
