"""`build` of a KernelBench solution compiles its load_inline CUDA for real (it used to report
success without compiling anything), and a compile error comes back with the compiler's output.
Needs a CUDA build of PyTorch and nvcc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelblaster.cli import main

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SOLUTION = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"


def test_the_solution_is_compiled(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBLASTER_CACHE_DIR", str(tmp_path))
    # load_inline's own build folder too: another test's build of the same solution would
    # make this one ninja's no-op
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "torch_extensions"))
    assert main(["build", str(SOLUTION), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["error"] is None and result["seconds"] > 0.5


def test_a_compile_error_is_reported_with_the_compiler_output(capsys, tmp_path):
    broken = tmp_path / "19_ReLU_solution.py"
    broken.write_text(SOLUTION.read_text().replace("__global__", "__global__ undeclared_t", 1))
    (tmp_path / "19_ReLU.py").write_text((EXAMPLES / "kernelbench" / "19_ReLU.py").read_text())
    assert main(["build", str(broken), "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "build_failed" and "undeclared_t" in error["log"]
