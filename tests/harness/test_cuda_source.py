"""Which kernels a target defines (what ncu is told to profile and what verification counts as
the candidate's own), for each source form; and that profiling a KernelBench solution asks ncu
for its own kernels only and writes nothing beside the user's files."""

from __future__ import annotations

from pathlib import Path

from recording_ncu import profile_quick, recorded_argv, recording_ncu

from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SOLUTION = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"


def test_kernels_of_a_cu_file_in_source_order():
    assert kernel_names(EXAMPLES / "bias_gelu_scale.cu") == [
        "add_bias",
        "gelu_inplace",
        "scale_inplace",
    ]


def test_kernels_of_a_kernelbench_solution_come_from_its_load_inline_strings():
    assert kernel_names(SOLUTION) == ["relu_kernel"]


def test_a_solution_that_does_not_parse_defines_no_kernels(tmp_path):
    broken = tmp_path / "broken_solution.py"
    broken.write_text('source = """__global__ void k() {}"""\nclass ModelNew(:\n')
    assert kernel_names(broken) == []


def test_profiling_a_kernelbench_solution_filters_to_its_kernels_and_stays_in_the_cache(
    tmp_path,
):
    ncu = recording_ncu(tmp_path / "bin")
    settings = Settings(ncu_path=str(ncu), cache_dir=str(tmp_path / "cache"))
    target = resolve_target(SOLUTION, settings)
    assert isinstance(target, Target)
    built = BuildResult(ok=True, source=str(SOLUTION), arch="sm_90")
    before = sorted(SOLUTION.parent.iterdir())
    _, messages = profile_quick(target, built, settings)
    argv = recorded_argv(ncu)
    assert argv[argv.index("-k") + 1] == "regex:^(.*::)?(relu_kernel)(<.*>)?$"
    assert messages == ["ncu (quick) on relu_kernel"]
    assert sorted(SOLUTION.parent.iterdir()) == before  # nothing written beside the user's files
    report_arg = Path(argv[argv.index("-o") + 1])
    assert (tmp_path / "cache" / "profile") in report_arg.parents
