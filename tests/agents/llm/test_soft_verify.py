"""Soft verification: JSON verdicts, flagged reward hacks, and unparseable replies rejected."""

from __future__ import annotations

from pathlib import Path

from bench.openai_server import reply
from kernelblaster.agents.llm.soft_verify import UNPARSEABLE, soft_verify

DATA = Path(__file__).resolve().parents[1] / "data"
NAIVE = (DATA.parents[2] / "examples" / "softmax.cu").read_text()  # the naive example
WARP = (DATA / "softmax_warp.cu").read_text()
REFERENCE = (
    "class Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, -1)\n"
)
# Skips every odd row: work silently dropped, the kind of hack the review must flag.
HACK = WARP.replace("if (row >= rows) return;", "if (row >= rows || row % 2) return;")
CONSTRAINTS = ["no cuBLAS, cuDNN or PyTorch calls"]


def verify(client, candidate: str = WARP):
    return soft_verify(
        client,
        reference_source=REFERENCE,
        original_source=NAIVE,
        candidate_source=candidate,
        constraints=CONSTRAINTS,
    )


def test_accepts_a_faithful_rewrite(openai_server, client):
    openai_server.push(reply('{"ok": true, "reasons": []}', usage=(2000, 12)))
    verdict = verify(client)
    assert verdict.ok and verdict.reasons == []
    assert verdict.usage.prompt_tokens == 2000
    (request,) = openai_server.chat_requests
    prompt = request.prompt_text
    assert REFERENCE.rstrip() in prompt and NAIVE.rstrip() in prompt and WARP.rstrip() in prompt
    assert "- no cuBLAS, cuDNN or PyTorch calls" in prompt
    assert request.body["temperature"] == 0.0
    assert client.usage_log[0][0] == "soft_verify"


def test_flags_dropped_work(openai_server, client):
    verdict_json = '{"ok": false, "reasons": ["odd rows are never written"]}'
    openai_server.push(reply(f"Looking at the bounds check...\n```json\n{verdict_json}\n```"))
    verdict = verify(client, HACK)
    assert not verdict.ok
    assert verdict.reasons == ["odd rows are never written"]


def test_flag_without_reason_gets_one(openai_server, client):
    openai_server.push(reply('{"ok": false}'))
    verdict = verify(client, HACK)
    assert not verdict.ok and verdict.reasons == [
        "the verifier flagged the candidate without giving a reason"
    ]


def test_garbage_is_retried_once_with_the_error(openai_server, client):
    openai_server.push(reply("Looks fine to me!"), reply('{"ok": true, "reasons": []}'))
    verdict = verify(client)
    assert verdict.ok
    first, second = openai_server.chat_requests
    assert second.messages[: len(first.messages)] == first.messages
    assert second.messages[-2] == {"role": "assistant", "content": "Looks fine to me!"}
    assert "no JSON object" in second.messages[-1]["content"]


def test_twice_unparseable_is_not_ok(openai_server, client):
    openai_server.push(reply("Looks fine to me!"), reply('{"ok": "yes"}'), reply("unused"))
    verdict = verify(client)
    assert not verdict.ok
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith(UNPARSEABLE)
    assert "Expected `bool`" in verdict.reasons[0]
    assert len(openai_server.chat_requests) == 2
    assert verdict.usage.prompt_tokens == 200  # both calls counted (100 each, scripted)
