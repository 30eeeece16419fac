"""Which kernels a target defines (what ncu is told to profile and what verification counts as
the candidate's own), for each source form; and that profiling a KernelBench solution asks ncu
for its own kernels only and writes nothing beside the user's files."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.harness.analysis.cuda_source import global_kernels, kernel_names
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings
from tests.harness.recording_ncu import profile_quick, recorded_argv, recording_ncu

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SOLUTION = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"


def test_kernels_of_a_cu_file_in_source_order():
    assert kernel_names(EXAMPLES / "bias_gelu_scale.cu") == [
        "add_bias",
        "gelu_inplace",
        "scale_inplace",
    ]


def test_kernels_with_attributes_the_grammar_does_not_know_are_found_where_they_are_named():
    # tree-sitter-cuda knows __launch_bounds__ only: these would read as a declaration of the
    # attribute and a function without a type, and the kernels would go missing (no lens, no
    # profile, and verification would count their launches as foreign kernels).
    source = (
        "__global__ void __cluster_dims__(2, 1, 1) clustered(float* x) { x[0] = 1; }\n"
        "__global__ void __maxnreg__(32) capped(float* x) { x[0] = 2; }\n"
        "__global__ void __cluster_dims__(CLUSTER_M,\n"
        "                                 (1 + 0), 1) __launch_bounds__(128) wrapped(float* x) {\n"
        "  x[0] = 3;\n"
        "}\n"
        "__global__ void after(float* x) { x[0] = 4; }\n"
    )
    found = [
        (k.name, k.name_line, k.name_start_column, k.start_line, k.end_line)
        for k in global_kernels(source)
    ]
    assert found == [
        ("clustered", 0, 42, 0, 0),
        ("capped", 1, 32, 1, 1),
        ("wrapped", 3, 68, 2, 5),
        ("after", 6, 16, 6, 6),
    ]


def test_explicit_specializations_and_qualified_kernels_are_named_by_their_bare_name():
    source = (
        "namespace ns { __global__ void a(float*); }\n"
        "template <typename T> __global__ void k(T* x) { x[0] = 1; }\n"
        "template <> __global__ void k<int>(int* x) { x[0] = 2; }\n"
        "__global__ void ns::a(float* x) { x[0] = 3; }\n"
    )
    kernels = global_kernels(source)
    assert [k.name for k in kernels] == ["k", "k", "a"]
    lines = source.splitlines()
    assert [lines[k.name_line][k.name_start_column : k.name_end_column] for k in kernels] == [
        "k",
        "k",
        "a",
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
