"""`python -m kernelblaster.agents.optimize_worker`: runs the optimization loop for the language
server. Reads an OptimizeRequest on stdin; writes OptimizeProgress lines, then one
OptimizeResponse. The server kills it to cancel; attempts recorded so far stay in the KB."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from kernelblaster.agents.llm import LlmClient, LlmConfig
from kernelblaster.agents.loop import optimize
from kernelblaster.agents.records import OptimizeProgress, OptimizeRequest, OptimizeResponse
from kernelblaster.agents.rollout_runners import runner_for
from kernelblaster.harness.processes import exit_with_parent
from kernelblaster.harness.protocol_stream import ProtocolStream
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import default_path, open_or_fallback
from kernelblaster.settings import Settings


def handle(request: OptimizeRequest, stream: ProtocolStream) -> OptimizeResponse:
    settings = msgspec.convert(request.settings, Settings)
    if not settings.llm_base_url and not settings.llm_api_key():
        return OptimizeResponse(
            kernel=request.kernel,
            improved=False,
            message="No LLM endpoint is configured.",
            error="Set llmBaseUrl (any OpenAI-compatible server) and llmModel, and put the API "
            f"key in the environment variable {settings.llm_api_key_env}.",
        )
    try:
        kb, kb_message = open_or_fallback(default_path(settings.kb_path))
    except KBError as exc:
        return OptimizeResponse(
            kernel=request.kernel,
            improved=False,
            message="The knowledge base can't be opened.",
            error=str(exc),
        )
    client = LlmClient(LlmConfig.from_settings(settings))

    def on_progress(step: int, total: int, message: str, best: float | None) -> None:
        stream.emit(OptimizeProgress(step=step, total=total, message=message, best_speedup=best))

    if kb_message:
        on_progress(0, request.rollouts * request.depth, kb_message, None)
    with kb:
        outcome = optimize(
            Path(request.source),
            request.source_text,
            request.kernel,
            settings=settings,
            client=client,
            kb=kb,
            rollouts=request.rollouts,
            depth=request.depth,
            k=request.top_k,
            technique=request.technique,
            seed=request.seed,
            on_progress=on_progress,
            run_rollouts=runner_for(settings),
        )
    if outcome.improved and outcome.speedup is not None:
        message = (
            f"{request.kernel}: {outcome.speedup:.2f}x faster ({' → '.join(outcome.techniques)}), "
            f"verified on fresh inputs and compute-sanitizer"
        )
    else:
        message = outcome.error or f"{request.kernel}: no verified candidate beat the original"
    return OptimizeResponse(
        kernel=request.kernel,
        improved=outcome.improved,
        best_source=outcome.best_source,
        speedup=outcome.speedup,
        speedup_vs_eager=outcome.speedup_vs_eager,
        speedup_vs_compile=outcome.speedup_vs_compile,
        techniques=outcome.techniques,
        attempts=len(outcome.steps),
        message=message,
        error=outcome.error if not outcome.improved else None,
    )


def main() -> int:
    exit_with_parent()
    stream = ProtocolStream()
    try:
        request = msgspec.json.decode(sys.stdin.buffer.read(), type=OptimizeRequest)
    except msgspec.ValidationError as exc:
        stream.emit(OptimizeResponse(kernel="", improved=False, error=f"malformed request: {exc}"))
        return 2
    stream.emit(handle(request, stream))
    return 0


if __name__ == "__main__":
    sys.exit(main())
