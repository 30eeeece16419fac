"""The lowering agent: an LLM rewrites a kernel to apply one technique, until a candidate passes the
caller's `check`. Two bounded budgets: `max_retries` for rejected candidates and
`max_format_retries` for replies with no usable file. A retry shows only the task, the last reply
and its fault, plus a line per earlier failure, so the prompt doesn't grow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import msgspec

from kernelblaster.agents.llm.client import LlmClient, Usage
from kernelblaster.agents.llm.code_extract import ExtractError, code_skeleton, extract_cuda_source
from kernelblaster.agents.llm.prompting import bullets, describe_state, render_messages
from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.kb.records import Technique

FEEDBACK_CHARS = 2000  # compiler output beyond this is mostly follow-on errors
FailureKind = Literal["compile_error", "wrong_result", "hack", "timeout", "crash"]

_FEEDBACK_HEADLINES: dict[str, str] = {
    "compile_error": "Your file does not compile:",
    "wrong_result": "Your file compiles but computes a different result than the reference:",
    "hack": "Your file was rejected because it does not do the real work itself:",
    "timeout": "Your kernel ran past the time limit (a hang, or far too slow):",
    "crash": "Your kernel crashed at run time:",
}


class Feedback(msgspec.Struct, kw_only=True, frozen=True):
    """Why `check` rejected a candidate; `message` is shown to the model (truncated)."""

    kind: FailureKind
    message: str


class LoweringInput(msgspec.Struct, kw_only=True):
    source: str  # the full current source file
    kernel: str
    state: PerfState
    technique: Technique
    notes: list[str] = []  # KB notes on (arch, state, technique)
    constraints: list[str] = []  # e.g. "no cuBLAS/cuDNN calls", "inputs are fp32"
    entry_names: list[str] = []  # functions that must still exist, e.g. the extern "C" launcher


class LoweringResult(msgspec.Struct, kw_only=True):
    source: str | None  # the candidate that passed `check`; None when none did
    attempts: int  # LLM calls made
    usage: Usage
    failures: list[str]  # one line per rejected reply or candidate, in order


def compact(text: str, limit: int = FEEDBACK_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters left out]"


def feedback_prompt(feedback: Feedback) -> str:
    """What the model is told about a candidate the harness rejected: a headline for the kind
    of failure, then the (shortened) details."""
    return f"{_FEEDBACK_HEADLINES[feedback.kind]}\n{compact(feedback.message)}"


def lowering_messages(inp: LoweringInput) -> list[dict[str, str]]:
    notes = f"Notes from earlier attempts:\n{bullets(inp.notes)}\n" if inp.notes else ""
    return render_messages(
        "lowering",
        entry_names=", ".join(f"`{name}`" for name in inp.entry_names) or "(none)",
        constraints=bullets(inp.constraints, empty=""),
        kernel=inp.kernel,
        arch=inp.state.arch,
        state=describe_state(inp.state),
        technique_id=inp.technique.id,
        technique_title=inp.technique.title,
        technique_description=inp.technique.description,
        how_to_apply=inp.technique.how_to_apply,
        notes=notes,
        source=inp.source.rstrip("\n"),
    )


def lower(
    client: LlmClient,
    inp: LoweringInput,
    *,
    check: Callable[[str], Feedback | None],
    max_retries: int = 2,
    max_format_retries: int = 2,
    max_tokens: int | None = None,
    on_usage: Callable[[Usage], None] = lambda usage: None,
) -> LoweringResult:
    """Ask for a rewrite and retry on failures until `check` accepts a candidate or a budget
    runs out. LlmError (endpoint down, auth, ...) propagates: retrying cannot fix it, and so
    does whatever `check` raises. `on_usage` gets each reply's tokens as they arrive, so a
    caller counts what was spent even when an error ends the lowering part way."""
    task = lowering_messages(inp)
    conversation = task
    usage = Usage()
    failures: list[str] = []
    attempts = check_failures = format_failures = 0
    while True:
        reply = client.chat(conversation, purpose="lowering", max_tokens=max_tokens)
        attempts += 1
        usage = usage + reply.usage
        on_usage(reply.usage)
        candidate, problem = _parse(reply.text, reply.finish_reason, inp)
        if candidate is None:
            failures.append(f"unusable reply: {first_line(problem)}")
            format_failures += 1
            if format_failures > max_format_retries:
                break
        else:
            feedback = check(candidate)
            if feedback is None:
                return LoweringResult(
                    source=candidate, attempts=attempts, usage=usage, failures=failures
                )
            problem = feedback_prompt(feedback)
            failures.append(f"{feedback.kind}: {first_line(feedback.message)}")
            check_failures += 1
            if check_failures > max_retries:
                break
        earlier = failures[:-1]
        retry = render_messages(
            "lowering_retry",
            problem=problem,
            earlier=f"Earlier attempts failed too:\n{bullets(earlier)}\n" if earlier else "",
        )
        conversation = [*task, {"role": "assistant", "content": reply.text}, *retry]
    return LoweringResult(source=None, attempts=attempts, usage=usage, failures=failures)


def _parse(text: str, finish_reason: str | None, inp: LoweringInput) -> tuple[str | None, str]:
    """(candidate, "") or (None, what to tell the model)."""
    if finish_reason == "length":
        return None, (
            "Your reply was cut off at the output token limit. Send only the complete file in "
            "one ```cuda block, with no explanation, and keep it as short as the change allows."
        )
    try:
        candidate = extract_cuda_source(text, entry_names=inp.entry_names)
    except ExtractError as exc:
        return None, exc.message
    if _normalized(candidate) == _normalized(inp.source):
        return None, (
            f"Your file is the same as the current source. Apply {inp.technique.title} and send "
            "the changed file."
        )
    return candidate, ""


def _normalized(source: str) -> str:
    return " ".join(code_skeleton(source).split())


def first_line(message: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."
