"""The lowering agent end to end against the scripted HTTP server: good rewrites, malformed
replies, and failure feedback loops, each bounded."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.openai_server import reply, server_error
from kernelblaster.agents.llm.client import LlmError
from kernelblaster.agents.llm.lowering import Feedback, LoweringInput, lower
from kernelblaster.harness.protocol.records import Finding, PerfState
from kernelblaster.kb.records import Technique

DATA = Path(__file__).resolve().parents[1] / "data"
NAIVE = (DATA.parents[2] / "examples" / "softmax.cu").read_text()  # the naive example
WARP = (DATA / "softmax_warp.cu").read_text()

COALESCE = Technique(
    id="coalesce_global_access",
    category="memory",
    title="Coalesce global memory accesses",
    description="Make consecutive threads of a warp access consecutive addresses.",
    how_to_apply="Map lanes to the contiguous dimension; reduce across lanes with shuffles.",
)
STATE = PerfState(
    kernel="softmax_rowthread",
    arch="sm_90",
    bottleneck="memory",
    state="memory.dram",
    summary="memory-bound: 4 of 32 bytes per sector used",
    findings=[Finding(id="uncoalesced_global_access", estimated_speedup=80.0, lines=[12])],
)


def lowering_input(**overrides) -> LoweringInput:
    fields = {
        "source": NAIVE,
        "kernel": "softmax_rowthread",
        "state": STATE,
        "technique": COALESCE,
        "notes": ["one warp per row beat one block per row on 4096-wide rows"],
        "constraints": ["no cuBLAS, cuDNN or PyTorch calls"],
        "entry_names": ["softmax"],
    }
    fields.update(overrides)
    return LoweringInput(**fields)


def cuda(code: str) -> str:
    return f"Here is the rewrite.\n```cuda\n{code}```\n"


class Recorder:
    """A `check` that fails the first `fail_first` candidates with `feedback`."""

    def __init__(self, fail_first: int = 0, feedback: Feedback | None = None) -> None:
        self.fail_first = fail_first
        self.feedback = feedback or Feedback(kind="compile_error", message="error")
        self.candidates: list[str] = []

    def __call__(self, candidate: str) -> Feedback | None:
        self.candidates.append(candidate)
        return self.feedback if len(self.candidates) <= self.fail_first else None


def test_good_rewrite_in_one_call(openai_server, client):
    openai_server.push(reply(cuda(WARP), usage=(900, 400)))
    check = Recorder()
    result = lower(client, lowering_input(), check=check)

    assert result.source == WARP
    assert result.attempts == 1
    assert result.failures == []
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (900, 400)
    assert check.candidates == [WARP]
    (request,) = openai_server.chat_requests
    system, user = request.messages
    assert system["role"] == "system" and user["role"] == "user"
    assert "`softmax`" in system["content"]
    assert "- no cuBLAS, cuDNN or PyTorch calls" in system["content"]
    for expected in (
        "Coalesce global memory accesses (`coalesce_global_access`)",
        COALESCE.how_to_apply,
        "one warp per row beat one block per row",
        "State `memory.dram`",
        "uncoalesced_global_access",
        NAIVE.rstrip(),
    ):
        assert expected in user["content"]
    assert [purpose for purpose, _ in client.usage_log] == ["lowering"]


@pytest.mark.parametrize(
    ("bad_reply", "told"),
    [
        (reply("Use one warp per row with shuffles."), "Your reply has no code block"),
        (reply(cuda(NAIVE) + "and\n" + cuda(WARP)), "2 different code blocks"),
        (
            reply(cuda(WARP.replace("void softmax(", "void softmax_v2("))),
            "does not define `softmax`",
        ),
        (reply(cuda(WARP), finish_reason="length"), "cut off at the output token limit"),
        (reply("```cuda\n" + WARP[:600]), "Your reply was cut off"),
        (reply(cuda(NAIVE.replace("// Row", "// The row"))), "the same as the current source"),
    ],
    ids=["no_code", "several_blocks", "wrong_name", "finish_length", "unclosed", "unchanged"],
)
def test_unusable_reply_is_retried_with_the_reason(openai_server, client, bad_reply, told):
    openai_server.push(bad_reply, reply(cuda(WARP)))
    check = Recorder()
    result = lower(client, lowering_input(), check=check)

    assert result.source == WARP
    assert result.attempts == 2
    assert len(result.failures) == 1 and result.failures[0].startswith("unusable reply: ")
    assert check.candidates == [WARP]  # the unusable reply never reached the harness
    first, second = openai_server.chat_requests
    assert second.messages[:2] == first.messages  # the task is repeated unchanged
    assert second.messages[2] == {"role": "assistant", "content": bad_reply.text}
    assert second.messages[3]["role"] == "user" and told in second.messages[3]["content"]


def test_compile_error_feedback_loop(openai_server, client):
    broken = WARP.replace("float inv = 1.0f / s;", "float inv = 1.0f / total;")
    compiler_output = 'softmax.cu(27): error: identifier "total" is undefined\n' + "x" * 5000
    openai_server.push(reply(cuda(broken)), reply(cuda(WARP)))
    check = Recorder(1, Feedback(kind="compile_error", message=compiler_output))
    result = lower(client, lowering_input(), check=check)

    assert result.source == WARP
    assert result.attempts == 2
    assert result.failures == [
        'compile_error: softmax.cu(27): error: identifier "total" is undefined'
    ]
    assert check.candidates == [broken, WARP]
    retry = openai_server.chat_requests[1].messages[-1]["content"]
    assert retry.startswith("Your file does not compile:\nsoftmax.cu(27): error")
    assert "more characters left out]" in retry and len(retry) < 2400  # compacted


def test_check_failures_are_bounded(openai_server, client):
    wrong = Feedback(kind="wrong_result", message="max abs error 0.31 at [17, 4000] (atol 1e-05)")
    candidates = [WARP.replace("256", str(n)) for n in (128, 512, 64)]
    openai_server.push(*(reply(cuda(c)) for c in candidates), reply(cuda(WARP)))
    check = Recorder(99, wrong)
    result = lower(client, lowering_input(), check=check, max_retries=2)

    assert result.source is None
    assert result.attempts == 3  # 1 + max_retries; the fourth scripted reply is never asked for
    assert len(openai_server.chat_requests) == 3
    assert result.failures == [f"wrong_result: {wrong.message}"] * 3
    third = openai_server.chat_requests[2].messages
    assert len(third) == 4  # the conversation does not grow with every round...
    assert "Earlier attempts failed too:\n- wrong_result: max abs error" in third[-1]["content"]
    assert third[2]["content"] == cuda(candidates[1])  # ...it carries only the last reply


def test_format_failures_have_their_own_bound(openai_server, client):
    openai_server.push(*(reply("I cannot do that.") for _ in range(4)))
    result = lower(client, lowering_input(), check=Recorder(), max_format_retries=2)
    assert result.source is None
    assert result.attempts == 3
    assert len(openai_server.chat_requests) == 3


def test_usage_is_summed_over_attempts(openai_server, client):
    openai_server.push(reply("no code", usage=(1000, 10)), reply(cuda(WARP), usage=None))
    result = lower(client, lowering_input(), check=Recorder())
    assert result.usage.prompt_tokens > 1000
    assert result.usage.completion_tokens > 10
    assert result.usage.estimated  # the second reply came without usage


def test_endpoint_errors_propagate(openai_server, make_client):
    client = make_client(max_retries=1)
    openai_server.push(reply("no code"), server_error(), server_error())
    with pytest.raises(LlmError) as caught:
        lower(client, lowering_input(), check=Recorder())
    assert caught.value.kind == "bad_response"


@pytest.mark.nvcc
def test_real_nvcc_errors_drive_the_retry(openai_server, client, tmp_path):
    """The check is a real nvcc compile; its error text is what the model sees."""

    def nvcc_check(candidate: str) -> Feedback | None:
        source = tmp_path / "candidate.cu"
        source.write_text(candidate)
        built = subprocess.run(
            ["nvcc", "-c", str(source), "-o", str(tmp_path / "candidate.o")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if built.returncode == 0:
            return None
        return Feedback(kind="compile_error", message=built.stdout + built.stderr)

    broken = WARP.replace("int lane = threadIdx.x % 32;", "int lane = threadIdx.x % warp_size;")
    openai_server.push(reply(cuda(broken)), reply(cuda(WARP)))
    result = lower(client, lowering_input(), check=nvcc_check)

    assert result.source == WARP
    assert result.attempts == 2
    assert 'identifier "warp_size" is undefined' in result.failures[0]
    retry = openai_server.chat_requests[1].messages[-1]["content"]
    assert 'identifier "warp_size" is undefined' in retry
