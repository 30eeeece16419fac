"""The `kernelblaster` command end to end, through the real worker process (nvcc needed)."""

import json

import pytest

from kernelblaster.check_cli import defines_no_kernel
from kernelblaster.cli import COMMANDS, build_parser, main
from kernelblaster.harness.analysis.build_report import format_build_result
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.protocol.setup_errors import NVIDIA_CONTROL_DEVICE
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


@pytest.mark.skipif(NVIDIA_CONTROL_DEVICE.exists(), reason="this machine has an NVIDIA driver")
def test_check_on_a_machine_without_a_gpu_names_the_gpu_not_a_torch_install(capsys):
    """A newcomer's laptop: the missing piece is the GPU and its driver, so the fix is another
    machine, not `pip install torch`; and it says what still works here."""
    assert main(["check", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "no_gpu"
    assert "no NVIDIA GPU driver" in error["message"]
    assert "pip install" not in error["fix"]
    assert "`kernelblaster build`" in error["fix"] and "`kernelblaster analyze`" in error["fix"]


def test_with_a_driver_a_cpu_only_torch_is_what_check_names(monkeypatch, tmp_path):
    """Where the driver is there, the CPU-only PyTorch is what stops the run: then installing
    its CUDA build is the fix."""
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("needs a CPU-only PyTorch")
    from kernelblaster.harness.check import check
    from kernelblaster.harness.protocol import setup_errors
    from kernelblaster.settings import Settings

    driver = tmp_path / "nvidiactl"
    driver.touch()
    monkeypatch.setattr(setup_errors, "NVIDIA_CONTROL_DEVICE", driver)
    error = check.gpu_problem(Settings())
    assert error is not None and error.kind == "torch_missing"
    assert "CPU-only build" in error.message and "pip install torch" in error.fix


def test_building_a_reference_py_says_to_pass_a_cu(tmp_path, capsys):
    """`build foo.py` on a reference (class Model) used to report a failed load_inline build
    "for " no arch; it is not a kernel, and the message says what to pass instead."""
    reference = tmp_path / "foo.py"
    reference.write_text((EXAMPLES / "softmax.py").read_text())
    assert main(["build", str(reference)]) == 1
    out = capsys.readouterr().out
    assert "foo.py is a PyTorch reference (class Model), not a kernel" in out
    assert "foo.cu beside foo.py" in out and "`kernelblaster init foo.py`" in out
    assert "load_inline" not in out and "failed" not in out


def test_building_a_py_that_is_no_solution_says_to_pass_a_cu(tmp_path, capsys):
    script = tmp_path / "helpers.py"
    script.write_text("SCALE = 2\n")
    assert main(["build", str(script)]) == 1
    out = capsys.readouterr().out
    assert "helpers.py is neither CUDA source nor a KernelBench solution" in out
    assert "Pass a .cu file" in out


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
    assert "without a GPU too" in error["fix"] and "plain CUDA" in error["fix"]


@pytest.mark.skipif(
    pytest.importorskip("torch").version.cuda is not None, reason="needs a CPU-only PyTorch"
)
def test_building_a_kernelbench_solution_compiles_it_or_says_why_not(capsys):
    solution = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"
    assert main(["build", str(solution), "--arch", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "None" not in out  # it used to print "built … (0.00 s): None" and succeed
    assert "load_inline" in out and "CUDA build of PyTorch" in out


def test_a_solution_built_for_no_given_arch_reports_none():
    """load_inline builds for the GPU's arch unless one is given, and makes no artifact of
    ours: the report used to say "build of x.py for  failed" and "built … : None"."""
    built = BuildResult(ok=True, source="/k/19_ReLU_solution.py", arch="", seconds=1.0)
    assert format_build_result(built) == "built 19_ReLU_solution.py (1.00 s)"
    failed = BuildResult(ok=False, source="/k/19_ReLU_solution.py", arch="")
    assert format_build_result(failed) == "build of 19_ReLU_solution.py failed"


def test_each_command_is_registered_by_the_module_the_table_names():
    every = build_parser([])._subparsers._group_actions[0].choices
    assert sorted(every) == sorted(COMMANDS)
    for command in COMMANDS:
        alone = build_parser([command])._subparsers._group_actions[0].choices
        assert command in alone


def test_a_cu_without_a_kernel_builds_but_says_there_is_nothing_to_report(tmp_path, capsys):
    source = tmp_path / "helpers.cu"
    source.write_text("__device__ float twice(float x) { return 2.0f * x; }\n")
    assert main(["build", str(source), "--arch", "sm_90"]) == 1
    assert "helpers.cu defines no kernel (__global__ function)" in capsys.readouterr().err


def test_a_solutions_kernels_in_load_inline_strings_count_as_kernels():
    """load_inline's build reports no resources: the solution's `__global__`s are its kernels,
    so its built answer is no "defines no kernel" error (the GPU test builds it for real)."""
    solution = EXAMPLES / "kernelbench" / "19_ReLU_solution.py"
    assert not defines_no_kernel(BuildResult(ok=True, source=str(solution), arch=""))
