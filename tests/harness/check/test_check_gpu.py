"""The harness end to end on a GPU, through the real worker process: every target form, every
verification failure mode, every reward-hacking case, and the isolation guarantees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.settings import load_settings

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[3]
TARGETS = REPO / "tests" / "fixtures" / "targets"
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def check(
    source: Path, cache_dir: Path, *, sanitize=False, reference=None, **overrides
) -> WorkerResponse:
    settings = load_settings(source, environ={}).merged(
        {"cache_dir": str(cache_dir), "run_timeout_s": 60.0, **overrides}
    )
    request = WorkerRequest(
        task="check",
        source=str(source),
        settings=settings,
        sanitize=sanitize,
        reference=str(reference) if reference else None,
    )
    return run_harness_sync(request, settings)


def hack_kinds(response: WorkerResponse) -> set[str]:
    assert response.check is not None and response.check.verify is not None, response
    return {h.kind for h in response.check.verify.hacks}


@pytest.mark.parametrize("name", ["relu", "row_sum", "softmax", "matmul"])
def test_plain_examples_verify_and_time(name, cache_dir):
    response = check(EXAMPLES / f"{name}.cu", cache_dir)
    assert response.error is None, response.error
    result = response.check
    assert result.verify.ok, result.verify.message
    assert len(result.verify.seeds) >= 3 and len(set(result.verify.seeds)) == len(
        result.verify.seeds
    )
    assert result.timing.median_ms > 0 and result.eager.median_ms > 0
    assert result.speedup_vs_eager == pytest.approx(
        result.eager.median_ms / result.timing.median_ms
    )
    assert result.arch.startswith("sm_")
    # until its median is pinned to ±0.5%, from 20 repetitions, at most 200
    assert 20 <= result.timing.repetitions <= 200
    # the reference side was made while nvcc built, every trial's sets ahead in the clean
    # reference process
    assert {
        "reference_load",
        "reference_probe",
        "clean_reference_load",
        "clean_reference_sets",
        "clean_reference_wait",
        "reference_after_build",
        "reference_checks_loaded",
        "load",
        "verify",
        "verify_gate",
        "verify_gate_calibration",
        "verify_gate_call",
        "verify_calls",
        "verify_checks",
        "verify_reference_here",
        "time",
        "time_repetitions",
        "time_recheck",
    } <= set(result.phase_seconds)


def test_a_build_that_fails_beside_its_reference_is_a_build_failure(cache_dir, tmp_path):
    broken = (TARGETS / "good.cu").read_text().replace("{", "{ undeclared_name;", 1)
    (tmp_path / "broken.cu").write_text(broken)
    shutil.copy(TARGETS / "relu_ref.py", tmp_path / "broken.py")
    response = check(tmp_path / "broken.cu", cache_dir)
    assert response.error.kind == "build_failed" and response.check is None
    assert any("undeclared_name" in d.message for d in response.build.diagnostics)


def test_a_reference_whose_inputs_fail_is_reported_after_the_build(cache_dir, tmp_path):
    shutil.copy(TARGETS / "good.cu", tmp_path / "noinputs.cu")
    reference = (TARGETS / "relu_ref.py").read_text()
    (tmp_path / "noinputs.py").write_text(
        reference.replace("    return [torch.randn(n)]", "    raise ValueError('no inputs')")
    )
    response = check(tmp_path / "noinputs.cu", cache_dir)
    assert response.build.ok
    assert response.error.kind == "bad_reference" and "get_inputs() in" in response.error.message


def test_torch_extension_example(cache_dir):
    response = check(EXAMPLES / "bias_gelu_scale.cu", cache_dir)
    assert response.error is None, response.error
    assert response.check.verify.ok, response.check.verify.message
    assert {r.demangled.split("(")[0] for r in response.build.resources} >= {
        "add_bias",
        "gelu_inplace",
    }


def test_two_file_torch_extension_verifies_and_a_kernel_edit_reuses_its_bindings(tmp_path):
    for suffix in (".cu", ".cpp", ".py"):
        shutil.copy(EXAMPLES / f"bias_gelu_scale_split{suffix}", tmp_path)
    source = tmp_path / "bias_gelu_scale_split.cu"
    first = check(source, tmp_path / "cache")
    assert first.error is None, first.error
    assert first.check.verify.ok, first.check.verify.message
    assert [s.cached for s in first.build.steps] == [False, False, False]
    source.write_text(source.read_text().replace("0.5f, n);", "0.5f * 1.0f, n);"))
    edited = check(source, tmp_path / "cache")
    assert edited.error is None and edited.check.verify.ok, edited.error
    bindings = edited.build.steps[1]
    assert Path(bindings.what).name == "bias_gelu_scale_split.cpp" and bindings.cached
    assert bindings.artifact == first.build.steps[1].artifact
    assert not edited.build.steps[0].cached


def test_standalone_program_against_golden(cache_dir):
    response = check(EXAMPLES / "saxpy_program.cu", cache_dir)
    assert response.error is None, response.error
    assert response.check.verify.ok, response.check.verify.message
    assert response.check.timing.median_ms > 0


def test_kernelbench_problem_and_solution(cache_dir):
    solution = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"
    response = check(solution, cache_dir, reference=EXAMPLES / "kernelbench" / "19_ReLU.py")
    assert response.error is None, response.error
    assert response.check.verify.ok, response.check.verify.message


def test_second_check_does_not_rebuild(cache_dir):
    first = check(TARGETS / "good.cu", cache_dir)
    second = check(TARGETS / "good.cu", cache_dir)
    assert first.check.verify.ok and second.build.cached


def test_wrong_result_reports_errors_and_index(cache_dir):
    response = check(TARGETS / "wrong_result.cu", cache_dir)
    verify = response.check.verify
    assert not verify.ok and verify.mismatches
    first = verify.mismatches[0]
    assert first.max_abs_error > 0 and first.first_bad_index and "max abs error" in verify.message
    assert response.check.timing is None  # nothing unverified is timed


def test_unwritten_elements_fail_through_nan_poison(cache_dir):
    verify = check(TARGETS / "unwritten.cu", cache_dir).check.verify
    assert not verify.ok
    assert verify.mismatches[0].nonfinite == 100
    assert verify.mismatches[0].first_bad_index == [(1 << 16) - 100]


def test_cached_output_is_named(cache_dir):
    assert "output_cached" in hack_kinds(check(TARGETS / "cached_output.cu", cache_dir))


def test_side_stream_is_named_from_what_ran_not_from_the_source(cache_dir):
    verify = check(TARGETS / "side_stream.cu", cache_dir).check.verify
    assert [h.kind for h in verify.hacks] == ["side_stream"]
    assert "side_stream" in {w.kind for w in verify.warnings}  # the source scan only warns


def test_library_call_is_named(cache_dir):
    assert "calls_library" in hack_kinds(check(TARGETS / "library_call.cu", cache_dir))


def test_torch_op_is_caught_at_runtime_and_the_catch_all_is_a_warning(cache_dir):
    verify = check(TARGETS / "swallowed.cu", cache_dir).check.verify
    assert not verify.ok and "calls_library" in {h.kind for h in verify.hacks}
    assert {"swallowed_exception", "calls_library"} <= {w.kind for w in verify.warnings}


def test_solution_calling_the_reference_is_named(cache_dir):
    assert "reads_reference" in hack_kinds(check(TARGETS / "calls_reference.py", cache_dir))


def test_out_of_bounds_write_is_found_by_memcheck_even_if_numbers_match(cache_dir):
    response = check(TARGETS / "out_of_bounds.cu", cache_dir, sanitize=True)
    findings = [h for h in response.check.verify.hacks if h.kind == "memcheck"]
    assert findings and findings[0].line == 4
    assert not response.check.verify.ok


def test_shared_memory_race_is_found_by_racecheck(cache_dir):
    response = check(TARGETS / "shared_race.cu", cache_dir, sanitize=True)
    assert "racecheck" in hack_kinds(response)


def test_clean_kernel_passes_the_sanitizer(cache_dir):
    response = check(TARGETS / "good.cu", cache_dir, sanitize=True)
    assert response.check.verify.ok and response.check.verify.hacks == []


def test_hanging_kernel_is_killed_and_the_next_run_works(cache_dir):
    response = check(TARGETS / "hang.cu", cache_dir, run_timeout_s=20.0)
    assert response.error is not None and response.error.kind == "timeout"
    assert "verify" in response.error.message
    assert check(TARGETS / "good.cu", cache_dir).check.verify.ok


def test_illegal_address_names_the_kernel_and_the_next_run_works(cache_dir):
    response = check(TARGETS / "illegal_address.cu", cache_dir)
    error = response.error
    assert error is not None and error.kind == "illegal_memory_access", error
    assert error.kernel == "relu_k"
    assert check(TARGETS / "good.cu", cache_dir).check.verify.ok


def test_pointer_count_mismatch_explains_the_convention(cache_dir):
    error = check(TARGETS / "too_many_pointers.cu", cache_dir).error
    assert error.kind == "shape_mismatch" and "3 pointers" in error.message
    assert "state_dict order" in error.fix


def test_unknown_scalar_name_explains_where_sizes_come_from(cache_dir):
    error = check(TARGETS / "unknown_scalar.cu", cache_dir).error
    assert error.kind == "shape_mismatch" and "`length`" in error.message


def test_broken_reference(cache_dir):
    error = check(TARGETS / "bad_reference_kernel.cu", cache_dir).error
    assert error.kind == "bad_reference" and "broken on purpose" in error.message


def test_missing_reference_still_builds(cache_dir):
    response = check(TARGETS / "lonely.cu", cache_dir)
    assert response.build.ok and response.error.kind == "no_reference"


def test_wrong_arch_is_reported(cache_dir, tmp_path):
    shutil.copy(TARGETS / "good.cu", tmp_path / "good.cu")
    shutil.copy(TARGETS / "relu_ref.py", tmp_path / "good.py")
    response = check(tmp_path / "good.cu", cache_dir, arch="sm_20")
    assert response.error.kind == "wrong_arch"


SLOW_KERNEL = """
#include <cuda_runtime.h>
// ReLU whose first thread spins for 300 ms (the GPU's global timer counts nanoseconds).
__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < 300000000ULL);
    }
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
extern "C" void relu(const float* x, float* y, int n, cudaStream_t s) {
    relu_k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
}
"""


def test_a_300_ms_kernel_is_timed_a_few_times_within_the_run_timeout(cache_dir, tmp_path):
    (tmp_path / "slow.cu").write_text(SLOW_KERNEL)
    shutil.copy(TARGETS / "relu_ref.py", tmp_path / "slow.py")
    result = check(tmp_path / "slow.cu", cache_dir, run_timeout_s=30.0).check
    assert result.verify.ok, result.verify.message
    # one second of device time: three repetitions, not 200 (a minute)
    assert 1 <= result.timing.repetitions <= 3
    assert result.timing.median_ms >= 290.0


OOM_REFERENCE = """
import torch
from torch import nn

class Model(nn.Module):
    def forward(self, x):
        # a 4 TiB intermediate: no GPU holds it
        return x.unsqueeze(0).expand(1 << 20, -1).contiguous().sum(0)

def get_inputs():
    return [torch.randn(1 << 20)]

def get_init_inputs():
    return []
"""


def test_out_of_memory_is_reported_as_such_with_what_the_problem_needs(cache_dir, tmp_path):
    shutil.copy(TARGETS / "good.cu", tmp_path / "huge.cu")
    (tmp_path / "huge.py").write_text(OOM_REFERENCE)
    error = check(tmp_path / "huge.cu", cache_dir).error
    assert error is not None and error.kind == "out_of_memory", error
    assert "ran out of memory" in error.message and "One input set is" in error.message
    assert "GiB free now" in error.message and "get_inputs()" in error.fix
    assert check(TARGETS / "good.cu", cache_dir).check.verify.ok  # the next run works
