"""`init`: the LLM writes a module's first plain-CUDA kernel, the harness builds and verifies
it, failures go back to the model. Against the scripted OpenAI-compatible HTTP server; builds
are real nvcc builds where marked. Verification needs a GPU: without one the real worker
stops at it (tested here); on a GPU, the verified path is covered by
tests/agents/kernelbench/test_kernelbench_gpu.py (init in the runner) and
tests/server/pipeline/test_write_kernel.py (the editor's action)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.openai_server import HttpError, reply
from kernelblaster.agents.llm.lowering import Feedback
from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.agents.loop.init_kernel import (
    describe_signature,
    initial_kernel,
    plain_form_problem,
)
from kernelblaster.atomic_files import save_file
from kernelblaster.cli import main
from kernelblaster.harness.protocol.records import CheckResult, HarnessError, Timing, VerifyResult
from kernelblaster.harness.target.reference_signature import (
    ScalarValue,
    SignatureResponse,
    TensorSlot,
    measure_signature,
)
from kernelblaster.settings import Settings

REPO = Path(__file__).resolve().parents[3]
RELU_REFERENCE = (REPO / "examples" / "relu.py").read_text()
RELU_KERNEL = (REPO / "examples" / "relu.cu").read_text()
BROKEN_KERNEL = RELU_KERNEL.replace("float v = x[i];", "float v = x[i]")  # a missing ';'
SIGNATURE = SignatureResponse(
    pointers=[
        TensorSlot(role="input", name="input 0", dtype="float32", shape=[16777216]),
        TensorSlot(role="output", name="output 0", dtype="float32", shape=[16777216]),
    ],
    scalars=[ScalarValue(name="n", value=16777216, origin="module constant")],
)


def cuda_reply(code: str) -> str:
    return f"Here is the kernel.\n```cuda\n{code}```\n"


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    path = tmp_path / "relu.py"
    path.write_text(RELU_REFERENCE)
    return path


def settings_for(tmp_path: Path) -> Settings:
    return Settings(cache_dir=str(tmp_path / "cache"))


def verified(ms: float = 0.5) -> Evaluation:
    timing = Timing(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, repetitions=20)
    check = CheckResult(
        source="relu.cu",
        target_kind="plain",
        timing=timing,
        verify=VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, message="matches"),
    )
    return Evaluation(outcome="verified", check=check, time_ms=ms)


class Scripted:
    """An evaluate() answering from a list of Evaluations, recording what it was asked: the
    source, the reference paired with it (resolved while it exists), the text and options."""

    def __init__(self, *answers: Evaluation):
        self.answers = list(answers)
        self.calls: list[tuple[Path, Path, str, dict]] = []

    def __call__(self, source, text, kernel, settings, **options) -> Evaluation:
        paired = Path(source).with_suffix(".py").resolve()
        self.calls.append((Path(source), paired, text, options))
        return self.answers.pop(0)


@pytest.mark.nvcc
def test_nvcc_errors_go_back_to_the_model_and_verification_needs_a_gpu(
    openai_server, client, problem, tmp_path
):
    """Real builds: an unusable reply and a compile error are fed back; the third reply builds,
    and the real worker then stops at verification on this GPU-less machine, which is the
    environment's fault: no further reply is asked for, and nothing is written."""
    if (tmp_path / "relu.cu").exists():
        raise AssertionError("fixture leak")
    openai_server.push(
        reply("I would write it with one thread per element."),
        reply(cuda_reply(BROKEN_KERNEL)),
        reply(cuda_reply(RELU_KERNEL)),
    )
    lines: list[tuple[int, str]] = []
    result = initial_kernel(
        problem,
        settings=settings_for(tmp_path),
        client=client,
        attempts=4,
        signature=SIGNATURE,
        on_attempt=lambda n, line: lines.append((n, line)),
    )
    requests = openai_server.chat_requests
    assert len(requests) == 3
    assert "has no code block" in requests[1].messages[-1]["content"]
    compile_feedback = requests[2].messages[-1]["content"]
    assert compile_feedback.startswith("Your file does not compile:")
    assert 'expected a ";"' in compile_feedback or "expected" in compile_feedback
    assert "Earlier attempts failed too" in compile_feedback  # the unusable reply, in one line
    assert requests[2].messages[-2] == {"role": "assistant", "content": cuda_reply(BROKEN_KERNEL)}
    assert [n for n, _ in lines] == [1, 2]
    assert lines[1][1].startswith("compile_error: line")
    assert result.source is None
    assert result.error_kind == "no_gpu"  # this machine has no GPU (and a CPU build of torch)
    assert "CPU-only" in (result.error or "")
    assert result.attempts == 3
    assert (result.prompt_tokens, result.completion_tokens) == (300, 150)
    assert not (tmp_path / "relu.cu").exists()
    assert not list((tmp_path / "cache" / "init").iterdir())  # the scratch pair is gone


def test_the_prompt_carries_the_module_and_its_measured_signature(
    openai_server, client, problem, tmp_path
):
    openai_server.push(reply(cuda_reply(RELU_KERNEL)))
    evaluate = Scripted(verified())
    result = initial_kernel(
        problem, settings=settings_for(tmp_path), client=client, evaluate_fn=evaluate,
        signature=SIGNATURE,
    )  # fmt: skip
    assert result.verified and result.source == RELU_KERNEL
    prompt = openai_server.chat_requests[0].prompt_text
    assert "Problem file: `relu.py`" in prompt
    assert "return torch.relu(x)" in prompt
    assert "1. input 0: float32 [16777216]" in prompt
    assert "2. output 0: float32 [16777216]" in prompt
    assert "- `n` = 16777216 (module constant)" in prompt
    assert "(the first input's element count)" not in prompt  # `n` is the module's own
    # The candidate is checked as a pair in a scratch folder, beside a link to the reference.
    checked, paired, text, options = evaluate.calls[0]
    assert checked.name == "relu.cu" and checked.parent != tmp_path
    assert paired == problem.resolve()
    assert text == RELU_KERNEL and options == {"profile": False}


def test_a_wrong_result_is_fed_back_until_the_budget_ends_with_the_last_error(
    openai_server, client, problem, tmp_path
):
    mismatch = "output 0 differs in 12 of 16777216 elements (trial 0, seed 7): first at [5]"
    for _ in range(2):
        openai_server.push(reply(cuda_reply(RELU_KERNEL)))
    wrong = Evaluation(
        outcome="wrong_result", feedback=Feedback(kind="wrong_result", message=mismatch)
    )
    result = initial_kernel(
        problem, settings=settings_for(tmp_path), client=client, attempts=2,
        evaluate_fn=Scripted(wrong, wrong), signature=SIGNATURE,
    )  # fmt: skip
    assert result.source is None and result.error_kind == "attempts"
    assert "no verified kernel after 2 replies" in (result.error or "")
    assert mismatch in (result.error or "")
    assert result.failures == [f"wrong_result: {mismatch}"] * 2
    second = openai_server.chat_requests[1].messages[-1]["content"]
    assert "computes a different result than the reference" in second and mismatch in second


def test_a_problem_that_does_not_fit_in_gpu_memory_stops_at_once(
    openai_server, client, problem, tmp_path
):
    openai_server.push(reply(cuda_reply(RELU_KERNEL)))
    oom = HarnessError(kind="out_of_memory", message="The GPU ran out of memory.", fix="Smaller.")
    result = initial_kernel(
        problem, settings=settings_for(tmp_path), client=client,
        evaluate_fn=Scripted(Evaluation(outcome="error", error=oom)), signature=SIGNATURE,
    )  # fmt: skip
    assert len(openai_server.chat_requests) == 1
    assert result.error_kind == "out_of_memory"
    assert result.error == "The GPU ran out of memory. Smaller."


def test_an_endpoint_failure_keeps_the_tokens_already_spent(
    openai_server, client, problem, tmp_path
):
    openai_server.push(reply("no code here", usage=(120, 30)), HttpError(401, "bad key"))
    result = initial_kernel(
        problem, settings=settings_for(tmp_path), client=client, signature=SIGNATURE,
        evaluate_fn=Scripted(),
    )  # fmt: skip
    assert result.error_kind == "llm" and result.llm_error == "auth"
    assert (result.prompt_tokens, result.completion_tokens) == (120, 30)
    assert result.attempts == 1


def test_replies_that_are_not_the_plain_form_are_refused_before_building():
    torch_file = "#include <torch/extension.h>\n__global__ void k() {}\n"
    assert "torch/ATen headers" in plain_form_problem(torch_file)
    program = "__global__ void k() {}\nint main() { return 0; }\n"
    assert "main()" in plain_form_problem(program)
    two = '__global__ void k() {}\nextern "C" void a() {}\nextern "C" void b() {}\n'
    assert 'exactly one extern "C" function' in plain_form_problem(two)
    assert "found: a, b" in plain_form_problem(two)
    assert plain_form_problem(RELU_KERNEL) is None


def test_saving_never_replaces_an_existing_kernel_unless_forced(tmp_path):
    target = tmp_path / "relu.cu"
    save_file(target, "first\n", force=False)
    assert target.read_text() == "first\n"
    with pytest.raises(FileExistsError):
        save_file(target, "second\n", force=False)
    assert target.read_text() == "first\n"
    save_file(target, "third\n", force=True)
    assert target.read_text() == "third\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relu.cu"]  # no temporary files left


def test_the_signature_is_measured_from_the_module(tmp_path):
    """In a child process, on the meta device: the state_dict order with its buffers (an int64
    num_batches_tracked), output shapes, and the scalars by the harness's precedence."""
    reference = tmp_path / "gemm_bn.py"
    reference.write_text(
        "import torch\nfrom torch import nn\n\n"
        "batch_size = 64\nin_features = 32\nout_features = 16\nscale = 0.5\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, in_features, out_features, scale):\n"
        "        super().__init__()\n"
        "        self.gemm = nn.Linear(in_features, out_features)\n"
        "        self.bn = nn.BatchNorm1d(out_features)\n"
        "        self.scale = scale\n"
        "    def forward(self, x):\n"
        "        print('forward prints to stdout')\n"
        "        return self.bn(self.gemm(x)) * self.scale, x.sum(dim=1)\n\n"
        "def get_inputs():\n    return [torch.rand(batch_size, in_features), 3]\n\n"
        "def get_init_inputs():\n    return [in_features, out_features, 2.0]\n"
    )
    signature = measure_signature(reference, timeout_s=120)
    assert signature.error is None and signature.unknown == []
    assert [(s.role, s.name, s.dtype, s.shape) for s in signature.pointers] == [
        ("input", "input 0", "float32", [64, 32]),
        ("parameter", "gemm.weight", "float32", [16, 32]),
        ("parameter", "gemm.bias", "float32", [16]),
        ("parameter", "bn.weight", "float32", [16]),
        ("parameter", "bn.bias", "float32", [16]),
        ("buffer", "bn.running_mean", "float32", [16]),
        ("buffer", "bn.running_var", "float32", [16]),
        ("buffer", "bn.num_batches_tracked", "int64", []),
        ("output", "output 0", "float32", [64, 16]),
        ("output", "output 1", "float32", [64]),
    ]
    scalars = {s.name: (s.value, s.origin) for s in signature.scalars}
    assert scalars == {
        "batch_size": (64, "module constant"),
        "in_features": (32, "module constant"),
        "out_features": (16, "module constant"),
        "scale": (2.0, "model attribute"),  # the model's attribute shadows the constant
    }
    text = describe_signature(signature)
    assert "8. buffer `bn.num_batches_tracked`: int64 [a single element]" in text
    assert "- `n` (or `numel`, `size`) = 2048 (the first input's element count)" in text


def test_a_signature_that_cannot_be_measured_is_left_to_the_source(tmp_path):
    reads_values = tmp_path / "reads.py"
    reads_values.write_text(
        "import torch\nfrom torch import nn\n\nn = 8\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n        return x[: int(x.sum().item()) % 4 + 1]\n\n"
        "def get_inputs():\n    return [torch.rand(n)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    signature = measure_signature(reads_values, timeout_s=120)
    assert [s.role for s in signature.pointers] == ["input"]
    assert len(signature.unknown) == 1 and signature.unknown[0].startswith("the outputs")
    assert "Not measured (derive from the source): the outputs" in describe_signature(signature)
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no such module')\n")
    assert measure_signature(broken, timeout_s=120).error.kind == "bad_reference"


def test_init_command_refuses_to_replace_a_kernel_without_asking(
    openai_server, problem, monkeypatch, capsys
):
    monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("KERNELBLASTER_LLM_MODEL", "test-model")
    problem.with_suffix(".cu").write_text("// mine\n")
    assert main(["init", str(problem)]) == 2
    assert "exists; pass --force to replace it" in capsys.readouterr().err
    assert openai_server.chat_requests == []  # no tokens spent on a kernel that can't be saved
    assert problem.with_suffix(".cu").read_text() == "// mine\n"
    assert main(["init", str(problem.with_suffix(".cu"))]) == 2
    assert "is not a Python file" in capsys.readouterr().err


@pytest.mark.nvcc
def test_init_command_says_why_no_kernel_was_written(
    openai_server, problem, monkeypatch, capsys, tmp_path
):
    """The whole command on this GPU-less machine: the reply builds, verification can't run,
    and the command says so, with the tokens spent, and writes nothing."""
    monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("KERNELBLASTER_LLM_MODEL", "test-model")
    monkeypatch.setenv("KERNELBLASTER_CACHE_DIR", str(tmp_path / "cache"))
    openai_server.push(reply(cuda_reply(RELU_KERNEL)))
    assert main(["init", str(problem), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["written"] is None and result["error_kind"] == "no_gpu"
    assert result["attempts"] == 1 and result["prompt_tokens"] == 100
    assert "2. output 0: float32 [16777216]" in openai_server.chat_requests[0].prompt_text
    assert not problem.with_suffix(".cu").exists()
