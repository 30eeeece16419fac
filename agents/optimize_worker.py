"""`python -m kernelblaster.agents.optimize_worker`: the agents worker, where the language server's
LLM work runs. It reads one request on stdin and answers with JSON lines: for an OptimizeRequest,
OptimizeProgress lines then the OptimizeResult; for an InitRequest, InitProgress lines then the
InitResult with the verified file's text. The server kills it to cancel."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from kernelblaster.agents.llm.client import LlmClient, LlmConfig, LlmError
from kernelblaster.agents.loop.init_kernel import initial_kernel
from kernelblaster.agents.loop.rollout_runners import runner_for
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.harness.protocol.init_protocol import InitProgress, InitRequest, InitResult
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeProgress,
    OptimizeRequest,
    OptimizeResult,
)
from kernelblaster.harness.protocol.processes import exit_with_parent
from kernelblaster.harness.protocol.protocol_stream import ProtocolStream
from kernelblaster.harness.protocol.worker_client import keep_spare_workers
from kernelblaster.harness.target.pairing import kernel_beside
from kernelblaster.kb.fallback import open_or_fallback
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import default_path
from kernelblaster.settings import Settings

Request = OptimizeRequest | InitRequest


def _no_endpoint(settings: Settings) -> str | None:
    if settings.llm_base_url or settings.llm_api_key():
        return None
    return (
        "No LLM endpoint is configured: set llmBaseUrl (any OpenAI-compatible server) and "
        f"llmModel, and put the API key in the environment variable {settings.llm_api_key_env}."
    )


def handle(request: OptimizeRequest, stream: ProtocolStream) -> OptimizeResult:
    settings = request.settings
    if (missing := _no_endpoint(settings)) is not None:
        return OptimizeResult(kernel=request.kernel, error=missing)
    try:
        kb, kb_message = open_or_fallback(default_path(settings.kb_path))
    except KBError as exc:
        return OptimizeResult(
            kernel=request.kernel, error=f"The knowledge base can't be opened: {exc}"
        )

    def on_progress(step: int, total: int, message: str, best: float | None) -> None:
        stream.emit(OptimizeProgress(step=step, total=total, message=message, best_speedup=best))

    if kb_message:
        on_progress(0, request.rollouts * request.depth, kb_message, None)
    with kb, keep_spare_workers():  # the run's evaluations start in prewarmed workers
        return run_optimization(
            OptimizeRun(
                request=request,
                client=LlmClient(LlmConfig.from_settings(settings)),
                kb=kb,
                on_progress=on_progress,
                run_rollouts=runner_for(settings),
            )
        )


def handle_init(request: InitRequest, stream: ProtocolStream) -> InitResult:
    settings = request.settings
    reference = Path(request.reference)
    failed = InitResult(reference=str(reference), target=str(kernel_beside(reference)))
    if (missing := _no_endpoint(settings)) is not None:
        failed.error, failed.error_kind, failed.llm_error = missing, "llm", "not_configured"
        return failed
    try:
        client = LlmClient(LlmConfig.from_settings(settings))
    except LlmError as exc:
        failed.error, failed.error_kind, failed.llm_error = f"LLM: {exc}", "llm", exc.kind
        return failed
    attempts = request.attempts or settings.init_attempts

    def progress(attempt: int, message: str) -> None:
        stream.emit(InitProgress(attempt=attempt, attempts=attempts, message=message))

    with keep_spare_workers():  # each reply's check starts in a worker prewarmed meanwhile
        return initial_kernel(
            reference,
            settings=settings,
            client=client,
            attempts=attempts,
            on_stage=progress,
            on_attempt=lambda n, line: progress(n, f"reply {n} rejected: {line}"),
        )


def main() -> int:
    exit_with_parent()
    stream = ProtocolStream()
    try:
        request = msgspec.json.decode(sys.stdin.buffer.read(), type=Request)
    except msgspec.ValidationError as exc:
        stream.emit(OptimizeResult(kernel="", error=f"malformed request: {exc}"))
        return 2
    if isinstance(request, InitRequest):
        stream.emit(handle_init(request, stream))
    else:
        stream.emit(handle(request, stream))
    return 0


if __name__ == "__main__":
    sys.exit(main())
