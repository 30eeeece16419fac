"""Source-level reward-hacking patterns, each on its own offending candidate. They are
warnings: runtime evidence alone fails a verification
(tests/harness/check/test_adversarial_*.py)."""

from pathlib import Path

from kernelblaster.harness.analysis.static_checks import check_cuda_source, check_python_solution
from kernelblaster.harness.protocol.records import VerifyWarning

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"


def kinds(findings):
    return {f.kind for f in findings}


def test_clean_kernel_has_no_findings():
    assert check_cuda_source((TARGETS / "good.cu").read_text()) == []


def test_cublas_call_is_flagged_at_its_line():
    findings = check_cuda_source((TARGETS / "library_call.cu").read_text())
    library = [f for f in findings if f.kind == "calls_library"]
    assert library and library[0].line == 5  # cublasCreate
    assert "cublasCreate" in library[0].message


def test_library_calls_allowed_when_the_target_says_so():
    text = (TARGETS / "library_call.cu").read_text()
    assert "calls_library" not in kinds(check_cuda_source(text, allow_library_calls=True))


def test_side_stream_and_catch_all_and_torch_op():
    assert "side_stream" in kinds(check_cuda_source((TARGETS / "side_stream.cu").read_text()))
    found = check_cuda_source((TARGETS / "swallowed.cu").read_text())
    assert {"swallowed_exception", "calls_library"} <= kinds(found)
    catch = next(f for f in found if f.kind == "swallowed_exception")
    assert catch.line == 7


def test_patterns_in_comments_are_ignored():
    text = "// cublasSgemm(handle, ...) would be cheating\n/* cudaStreamCreate(&s) */\n"
    assert check_cuda_source(text) == []


def test_solution_calling_the_reference_model():
    found = check_python_solution(
        (TARGETS / "calls_reference.py").read_text(), reference_module="relu_ref"
    )
    assert kinds(found) == {"reads_reference"}
    assert {f.line for f in found} >= {3, 9}  # the import and the use


def test_solution_with_swallowing_except_and_torch_call():
    source = (
        "import torch\n"
        "class ModelNew:\n"
        "    def forward(self, x):\n"
        "        try:\n"
        "            return kernel(x)\n"
        "        except Exception:\n"
        "            return torch.relu(x)\n"
    )
    found = check_python_solution(source)
    assert kinds(found) == {"swallowed_exception", "calls_library"}
    assert next(f for f in found if f.kind == "swallowed_exception").line == 6


def test_except_that_reraises_is_fine():
    source = "try:\n    f()\nexcept Exception as e:\n    raise RuntimeError('x') from e\n"
    assert check_python_solution(source) == []


def test_inline_cuda_in_solution_is_scanned_with_file_lines():
    source = 'x = 1\nsrc = """\n__global__ void k() {}\nvoid f() { cublasSgemm(h); }\n"""\n'
    found = check_python_solution(source)
    assert [(f.kind, f.line) for f in found] == [("calls_library", 4)]


def test_kernelbench_example_solution_is_clean():
    solution = Path(__file__).resolve().parents[3] / "examples/kernelbench/19_ReLU_solution.py"
    assert check_python_solution(solution.read_text(), reference_module="19_ReLU") == []


def test_a_stream_api_in_a_path_never_taken_is_a_warning_not_a_verdict():
    # the honest solution of issue 12: a correct kernel, plus a debug path that is never taken
    source = (
        "__global__ void k(const float* x, float* y, int n) { /* ... */ }\n"
        'extern "C" void launch(const float* x, float* y, int n, cudaStream_t s) {\n'
        "    if (n < 0) {\n"
        "        cudaStream_t side;\n"
        "        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);\n"
        "    }\n"
        "    k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);\n"
        "}\n"
    )
    found = check_cuda_source(source)
    assert [(f.kind, f.line) for f in found] == [("side_stream", 5)]  # one per call
    assert all(isinstance(f, VerifyWarning) for f in found)
    assert "checked when it runs" in found[0].message


def test_python_streams_are_warned_about_at_their_line():
    source = (
        "import torch\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.side = torch.cuda.Stream()\n"
        "    def forward(self, x):\n"
        "        with torch.cuda.stream(self.side):\n"
        "            return kernel(x)\n"
    )
    found = check_python_solution(source)
    assert [(f.kind, f.line) for f in found] == [("side_stream", 5), ("side_stream", 7)]
    assert "`torch.cuda.Stream`" in found[0].message


def test_one_warning_per_call_however_it_is_wrapped_or_flagged():
    # llm.c wraps every cuBLAS call in its own `cublasCheck(...)`, named like the library, and
    # cuda-samples create streams with `cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)`:
    # each line got two warnings, one of them about the user's own error check
    source = (
        "void gemm(cublasHandle_t h, cudaStream_t* s) {\n"
        "    cublasCheck(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, a, b, 1, 0, 1, c, 1));\n"
        "    cudaCheck(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));\n"
        "}\n"
    )
    found = [(f.kind, f.line, f.message.split(":")[0]) for f in check_cuda_source(source)]
    assert found == [
        ("calls_library", 2, "calls `cublasSgemm`"),
        ("side_stream", 3, "`cudaStreamCreateWithFlags`"),
    ]
