"""The `kernelblaster` command end to end, through the real worker process (nvcc needed)."""

import json

import pytest
from tests_paths import EXAMPLES, TARGETS

from kernelblaster.cli import main

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
