"""The `kernelblaster` command end to end, through the real worker process (nvcc needed)."""

import json

import pytest

from kernelblaster.cli import COMMANDS, build_parser, main
from tests.tests_paths import EXAMPLES, TARGETS

pytestmark = pytest.mark.nvcc


def test_build_json_reports_resources_and_occupancy(capsys):
    assert main(["build", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["arch"] == "sm_90"
    (kernel,) = result["resources"]
    assert kernel["demangled"].startswith("softmax_rowthread(")
    assert kernel["registers"] > 0 and 0 < kernel["theoretical_occupancy"] <= 1


def test_build_of_broken_source_prints_compiler_style_errors(tmp_path, capsys):
    broken = tmp_path / "broken.cu"
    broken.write_text("__global__ void k(float* y) {\n    y[0] = undefined_name;\n}\n")
    assert main(["build", str(broken), "--arch", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "broken.cu:2" in out and "undefined_name" in out


def test_check_without_a_gpu_says_so_and_how_to_fix(capsys):
    assert main(["check", str(TARGETS / "good.cu"), "--arch", "sm_90", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] in ("torch_missing", "no_gpu", "no_driver")
    assert error["fix"]


def test_check_of_an_unpaired_file_explains_pairing(capsys):
    assert main(["check", str(TARGETS / "lonely.cu"), "--arch", "sm_90", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "no_reference" and "lonely.py" in error["fix"]


def test_missing_file(capsys):
    assert main(["build", "/no/such/file.cu"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_stray_latin1_byte_in_a_comment_builds_as_nvcc_would(tmp_path, capsys):
    source = tmp_path / "latin1.cu"
    source.write_bytes(b"// caf\xe9 kernel\n__global__ void k(float* y) { y[0] = 1.0f; }\n")
    assert main(["build", str(source), "--arch", "sm_90", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]


@pytest.mark.skipif(
    pytest.importorskip("torch").version.cuda is not None, reason="needs a CPU-only PyTorch"
)
def test_an_extension_with_cpu_only_torch_says_a_cuda_build_is_needed(capsys):
    assert main(["build", str(EXAMPLES / "bias_gelu_scale.cu"), "--arch", "sm_90", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "torch_missing"
    assert "needs a CUDA build of PyTorch" in error["message"] and "CUDA_HOME" in error["message"]
    assert "plain CUDA" in error["fix"]


@pytest.mark.skipif(
    pytest.importorskip("torch").version.cuda is not None, reason="needs a CPU-only PyTorch"
)
def test_building_a_kernelbench_solution_compiles_it_or_says_why_not(capsys):
    solution = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"
    assert main(["build", str(solution), "--arch", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "None" not in out  # it used to print "built … (0.00 s): None" and succeed
    assert "load_inline" in out and "CUDA build of PyTorch" in out


def test_each_command_is_registered_by_the_module_the_table_names():
    every = build_parser([])._subparsers._group_actions[0].choices
    assert sorted(every) == sorted(COMMANDS)
    for command in COMMANDS:
        alone = build_parser([command])._subparsers._group_actions[0].choices
        assert command in alone
