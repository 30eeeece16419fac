"""Target resolution: which form a file is and what it is checked against (no GPU needed)."""

import shutil
from pathlib import Path

import pytest

from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.harness.target.target_build import load_inline_folder
from kernelblaster.harness.target.targets import Target, kept_functions, resolve_target
from kernelblaster.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
TARGETS = REPO / "tests" / "fixtures" / "targets"


def test_plain_pair_finds_reference_and_launcher():
    target = resolve_target(EXAMPLES / "softmax.cu", Settings())
    assert isinstance(target, Target)
    assert (target.kind, target.entry) == ("plain", "softmax")
    assert target.reference == str(EXAMPLES / "softmax.py")


def test_extension_pair_uses_forward():
    target = resolve_target(EXAMPLES / "bias_gelu_scale.cu", Settings())
    assert isinstance(target, Target)
    assert (target.kind, target.entry) == ("extension", "forward")


def test_standalone_program_uses_golden_file_beside_it():
    target = resolve_target(EXAMPLES / "saxpy_program.cu", Settings())
    assert isinstance(target, Target)
    assert target.kind == "standalone"
    assert target.golden == str(EXAMPLES / "saxpy_program.golden")


def test_kernelbench_solution_with_explicit_reference():
    solution = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"
    reference = EXAMPLES / "kernelbench" / "19_ReLU.py"
    target = resolve_target(solution, Settings(), reference=reference)
    assert isinstance(target, Target)
    assert (target.kind, target.entry, target.reference) == (
        "kernelbench",
        "ModelNew",
        str(reference),
    )


def test_kernelbench_solution_named_after_its_problem_finds_it():
    target = resolve_target(EXAMPLES / "kernelbench" / "19_ReLU_solution.py", Settings())
    assert isinstance(target, Target)
    assert (target.kind, target.reference) == (
        "kernelbench",
        str(EXAMPLES / "kernelbench" / "19_ReLU.py"),
    )


def test_kernelbench_solution_without_its_problem_says_how_to_pair(tmp_path):
    solution = tmp_path / "19_ReLU_solution.py"
    solution.write_text("class ModelNew: ...\n")
    error = resolve_target(solution, Settings())
    assert isinstance(error, HarnessError)
    assert error.kind == "no_reference"
    assert "KernelBench solution" in error.message
    assert "--reference" in error.fix and "19_ReLU.py and 19_ReLU_solution.py" in error.fix
    # a solution is never its own reference
    assert "Put 19_ReLU_solution.py beside it" not in error.fix


def test_missing_reference_says_how_to_pair():
    error = resolve_target(TARGETS / "lonely.cu", Settings())
    assert isinstance(error, HarnessError)
    assert error.kind == "no_reference"
    assert "lonely.py" in error.fix and "kernelblaster.toml" in error.fix


def test_several_launchers_without_entry_is_an_error(tmp_path):
    source = tmp_path / "two.cu"
    source.write_text('extern "C" void a(float* x) {}\nextern "C" void b(float* x) {}\n')
    (tmp_path / "two.py").write_text("")
    error = resolve_target(source, Settings())
    assert isinstance(error, HarnessError)
    assert error.kind == "entry_missing"
    assert "a, b" in error.message


def test_explicit_target_from_kernelblaster_toml():
    settings = load_settings(TARGETS / "library_call.cu", environ={})
    target = resolve_target(TARGETS / "library_call.cu", settings)
    assert isinstance(target, Target)
    assert target.nvcc_flags == ["-lcublas"]
    assert target.reference == str(TARGETS / "relu_ref.py")


def test_explicit_kernelbench_target_in_toml():
    settings = load_settings(TARGETS, environ={})
    target = resolve_target(TARGETS / "calls_reference.py", settings)
    assert isinstance(target, Target)
    assert (target.kind, target.reference) == ("kernelbench", str(TARGETS / "relu_ref.py"))


def test_explicit_reference_that_does_not_exist(tmp_path):
    (tmp_path / "k.cu").write_text('extern "C" void k(float* y) {}\n')
    (tmp_path / "kernelblaster.toml").write_text(
        '[[targets]]\nsource = "k.cu"\nreference = "nope.py"\n'
    )
    error = resolve_target(tmp_path / "k.cu", load_settings(tmp_path, environ={}))
    assert isinstance(error, HarnessError)
    assert error.kind == "no_reference" and "nope.py" in error.message


@pytest.mark.parametrize("name", ["relu", "row_sum", "softmax", "matmul"])
def test_every_plain_example_resolves(name):
    target = resolve_target(EXAMPLES / f"{name}.cu", Settings())
    assert isinstance(target, Target) and target.kind == "plain" and target.entry == name


def test_kernels_beside_their_bindings_are_an_extension_built_with_them():
    target = resolve_target(EXAMPLES / "bias_gelu_scale_split.cu", Settings())
    assert isinstance(target, Target)
    assert (target.kind, target.entry) == ("extension", "forward")
    assert target.bindings == str(EXAMPLES / "bias_gelu_scale_split.cpp")
    assert target.reference == str(EXAMPLES / "bias_gelu_scale_split.py")
    # a rewrite of the kernels file keeps what the bindings call, not forward (theirs)
    assert kept_functions(target) == ["bias_gelu_scale"]
    single = resolve_target(EXAMPLES / "bias_gelu_scale.cu", Settings())
    assert single.bindings is None and kept_functions(single) == ["forward"]


def write_pair(directory: Path, cpp: str) -> Path:
    (directory / "k.cu").write_text('extern "C" void k(float* y) {}\n')
    shutil.copy(EXAMPLES / "relu.py", directory / "k.py")
    (directory / "k.cpp").write_text(cpp)
    return directory / "k.cu"


def test_a_cpp_beside_without_pybind11_module_is_not_bindings(tmp_path):
    source = write_pair(tmp_path, "// PYBIND11_MODULE is only mentioned here\nint cpu_k();\n")
    target = resolve_target(source, Settings())
    assert isinstance(target, Target)
    assert (target.kind, target.entry, target.bindings) == ("plain", "k", None)


def test_bindings_from_kernelblaster_toml_are_relative_to_it(tmp_path):
    source = write_pair(tmp_path, "int not_bindings();\n")
    (tmp_path / "glue").mkdir()
    (tmp_path / "glue" / "b.cpp").write_text("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")
    (tmp_path / "kernelblaster.toml").write_text(
        '[[targets]]\nsource = "k.cu"\nreference = "k.py"\nbindings = "glue/b.cpp"\n'
    )
    target = resolve_target(source, load_settings(tmp_path, environ={}))
    assert isinstance(target, Target)
    assert (target.kind, target.bindings) == ("extension", str(tmp_path / "glue" / "b.cpp"))


@pytest.mark.parametrize(
    ("entry", "kind", "message"),
    [
        ('bindings = "gone.cpp"', "bad_target", "gone.cpp"),
        ('bindings = "k.cpp"\nkind = "plain"', "bad_target", "only a PyTorch extension"),
    ],
)
def test_bad_bindings_configuration_says_what_to_fix(tmp_path, entry, kind, message):
    source = write_pair(tmp_path, "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")
    (tmp_path / "kernelblaster.toml").write_text(
        f'[[targets]]\nsource = "k.cu"\nreference = "k.py"\n{entry}\n'
    )
    error = resolve_target(source, load_settings(tmp_path, environ={}))
    assert isinstance(error, HarnessError)
    assert error.kind == kind and message in error.message and error.fix


def test_each_solution_source_gets_its_own_load_inline_folder(tmp_path):
    """An original and its rewrite both call load_inline(name="relu"): built side by side in
    one folder, one deleted the other's relu.so (ImportError on the H200). A folder per
    source and arch keeps them apart; the same source finds its earlier build."""
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    original, rewrite = tmp_path / "a_solution.py", tmp_path / "b_solution.py"
    original.write_text("relu = load_inline(name='relu', cuda_sources=A)\n")
    rewrite.write_text("relu = load_inline(name='relu', cuda_sources=B)\n")
    first = load_inline_folder(original, "", settings)
    assert first.is_dir() and first.parent == tmp_path / "cache" / "torch_extensions"
    assert load_inline_folder(rewrite, "", settings) != first
    assert load_inline_folder(original, "sm_90", settings) != first
    assert load_inline_folder(original, "", settings) == first
