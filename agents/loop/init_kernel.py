"""`init`: the first CUDA kernel for a PyTorch module, written by the LLM and verified by the
harness, as the paper's loop starts. Each reply is checked for the plain form, then built and
verified on a scratch copy; a build error, a wrong result or a crash goes back to the model,
within `attempts`. A failure that is not the candidate's stops at once. Nothing is written here:
the caller saves the verified file."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path

from kernelblaster.agents.llm.client import LlmClient, LlmError, LlmReply, Usage
from kernelblaster.agents.llm.code_extract import ExtractError, extract_cuda_source
from kernelblaster.agents.llm.lowering import compact, feedback_prompt, first_line
from kernelblaster.agents.llm.prompting import bullets, render_messages
from kernelblaster.agents.loop.evaluation import Evaluation, evaluate
from kernelblaster.folders import CACHE_FIX, new_folder_in
from kernelblaster.harness.analysis.cuda_source import extern_c_functions
from kernelblaster.harness.protocol.init_protocol import InitResult
from kernelblaster.harness.target.pairing import kernel_beside
from kernelblaster.harness.target.reference_signature import SignatureResponse, measure_signature
from kernelblaster.harness.target.targets import detect_kind
from kernelblaster.settings import Settings

Evaluate = Callable[..., Evaluation]


def describe_signature(signature: SignatureResponse) -> str:
    """The launcher's parameters for the prompt, in the order the harness passes them."""
    if not signature.pointers and not signature.scalars:
        return "Derive the launcher's parameters from the source, following the convention."
    lines = ["The launcher's parameters, measured from the module:", "Pointers, in order:"]
    for number, slot in enumerate(signature.pointers, start=1):
        shape = "x".join(map(str, slot.shape)) if slot.shape else "a single element"
        label = slot.name if slot.role in ("input", "output") else f"{slot.role} `{slot.name}`"
        lines.append(f"{number}. {label}: {slot.dtype} [{shape}]")
    scalars = [f"- `{s.name}` = {s.value} ({s.origin})" for s in signature.scalars]
    inputs = [slot for slot in signature.pointers if slot.role == "input"]
    named = {s.name for s in signature.scalars}
    if inputs and not named & {"n", "numel", "size"}:
        count = math.prod(inputs[0].shape)
        scalars.append(f"- `n` (or `numel`, `size`) = {count} (the first input's element count)")
    if scalars:
        lines += ["Scalars available by name:", *scalars]
    if signature.unknown:
        lines.append("Not measured (derive from the source): " + "; ".join(signature.unknown))
    return "\n".join(lines)


def init_messages(reference: Path, signature: SignatureResponse) -> list[dict[str, str]]:
    return render_messages(
        "init",
        problem_file=reference.name,
        reference_source=reference.read_text(encoding="utf-8").rstrip("\n"),
        signature=describe_signature(signature),
    )


def plain_form_problem(text: str) -> str | None:
    """What keeps `text` from being a plain-CUDA target, said to the model; None if nothing."""
    kind = detect_kind(Path("candidate.cu"), text)
    if kind == "extension":
        return (
            "Your file includes torch/ATen headers. Write plain CUDA (cuda_runtime.h only) with "
            'one extern "C" launcher that receives device pointers.'
        )
    if kind == "standalone":
        return 'Your file defines main(). Write only the kernels and one extern "C" launcher.'
    launchers = [f.name for f in extern_c_functions(text)]
    if len(launchers) != 1:
        found = ", ".join(launchers) or "none"
        return (
            f'Your file must define exactly one extern "C" function, the launcher (found: '
            f"{found}). Make helpers static or __device__."
        )
    return None


def _candidate(reply: LlmReply) -> tuple[str | None, str]:
    """(the CUDA file, "") or (None, what to tell the model)."""
    if reply.finish_reason == "length":
        return None, (
            "Your reply was cut off at the output token limit. Send only the complete file in "
            "one ```cuda block, with no explanation."
        )
    try:
        text = extract_cuda_source(reply.text, entry_names=[])
    except ExtractError as exc:
        return None, exc.message
    problem = plain_form_problem(text)
    return (None, problem) if problem else (text, "")


class _Scratch:
    """A scratch pair to check candidates in: `<stem>.cu` holding the candidate beside a link
    to the reference, so the worker pairs them as it pairs the real files, while the user's
    directory stays untouched until a candidate is verified."""

    def __init__(self, reference: Path, settings: Settings):
        folder = self._folder = new_folder_in(
            settings.cache_folder("init"), f"{reference.stem}-", fix=CACHE_FIX
        )
        (folder / reference.name).symlink_to(reference.resolve())
        self.source = kernel_beside(reference, folder)

    def check(self, text: str, settings: Settings, evaluate_fn: Evaluate) -> Evaluation:
        self.source.write_text(text, encoding="utf-8")
        return evaluate_fn(self.source, text, "", settings, profile=False)

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)


def initial_kernel(
    reference: Path,
    *,
    settings: Settings,
    client: LlmClient,
    attempts: int | None = None,
    evaluate_fn: Evaluate = evaluate,
    signature: SignatureResponse | None = None,
    on_attempt: Callable[[int, str], None] = lambda _n, _line: None,
    on_stage: Callable[[int, str], None] = lambda _n, _what: None,
) -> InitResult:
    """A verified plain-CUDA file for `reference`, or the reason there is none, within
    `attempts` replies (default: settings.init_attempts). `signature` defaults to the one
    measured from the reference; `on_attempt(n, line)` hears of each rejected reply, and
    `on_stage(n, what)` of what is being done for reply n (0: before the first)."""
    attempts = attempts or settings.init_attempts
    reference = reference.resolve()
    result = InitResult(reference=str(reference), target=str(kernel_beside(reference)))
    if signature is None:
        on_stage(0, "measuring the launcher's parameters from the module")
        signature = measure_signature(reference, timeout_s=settings.run_timeout_s)
    if signature.error is not None:
        result.error = f"{signature.error.message} {signature.error.fix}".strip()
        result.error_kind = signature.error.kind
        return result
    task = init_messages(reference, signature)
    conversation = task
    usage = Usage()
    scratch = _Scratch(reference, settings)
    try:
        for attempt in range(1, attempts + 1):
            on_stage(attempt, f"asking {client.config.model} for reply {attempt}")
            try:
                reply = client.chat(conversation, purpose="init")
            except LlmError as exc:
                result.error, result.error_kind, result.llm_error = f"LLM: {exc}", "llm", exc.kind
                break
            result.attempts, usage = attempt, usage + reply.usage
            text, problem = _candidate(reply)
            if text is not None:
                on_stage(attempt, f"building and verifying reply {attempt}")
                evaluation = scratch.check(text, settings, evaluate_fn)
                result.check = evaluation.check
                if evaluation.verified:
                    result.source = text
                    break
                if evaluation.error is not None:  # the environment's or the problem's fault
                    error = evaluation.error
                    result.error = f"{error.message} {error.fix}".strip()
                    result.error_kind = error.kind
                    break
                feedback = evaluation.feedback
                assert feedback is not None
                problem = feedback_prompt(feedback)
                result.failures.append(f"{evaluation.outcome}: {first_line(feedback.message)}")
            else:
                result.failures.append(f"unusable reply: {first_line(problem)}")
            on_attempt(attempt, result.failures[-1])
            if attempt == attempts:
                result.error = (
                    f"no verified kernel after {attempts} replies; the last was rejected "
                    f"because:\n{compact(problem)}"
                )
                result.error_kind = "attempts"
                break
            earlier = result.failures[:-1]
            retry = render_messages(
                "lowering_retry",
                problem=problem,
                earlier=f"Earlier attempts failed too:\n{bullets(earlier)}\n" if earlier else "",
            )
            conversation = [*task, {"role": "assistant", "content": reply.text}, *retry]
    finally:
        scratch.close()
        result.prompt_tokens = usage.prompt_tokens
        result.completion_tokens = usage.completion_tokens
        result.estimated_tokens = usage.estimated
    return result
