"""`python -m kernelblaster.agents.optimize_worker`: runs the optimization loop for the language
server. Reads an OptimizeRequest on stdin; writes OptimizeProgress lines, then the loop's
OptimizeResult (harness.optimize_protocol). The server kills it to cancel; attempts recorded so
far stay in the KB."""

from __future__ import annotations

import sys

import msgspec

from kernelblaster.agents.llm import LlmClient, LlmConfig
from kernelblaster.agents.loop import OptimizeRun, run_optimization
from kernelblaster.agents.rollout_runners import runner_for
from kernelblaster.harness.optimize_protocol import (
    OptimizeProgress,
    OptimizeRequest,
    OptimizeResult,
)
from kernelblaster.harness.processes import exit_with_parent
from kernelblaster.harness.protocol_stream import ProtocolStream
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import default_path, open_or_fallback


def handle(request: OptimizeRequest, stream: ProtocolStream) -> OptimizeResult:
    settings = request.settings
    if not settings.llm_base_url and not settings.llm_api_key():
        return OptimizeResult(
            kernel=request.kernel,
            error="No LLM endpoint is configured: set llmBaseUrl (any OpenAI-compatible server) "
            f"and llmModel, and put the API key in the environment variable "
            f"{settings.llm_api_key_env}.",
        )
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
    with kb:
        return run_optimization(
            OptimizeRun(
                request=request,
                client=LlmClient(LlmConfig.from_settings(settings)),
                kb=kb,
                on_progress=on_progress,
                run_rollouts=runner_for(settings),
            )
        )


def main() -> int:
    exit_with_parent()
    stream = ProtocolStream()
    try:
        request = msgspec.json.decode(sys.stdin.buffer.read(), type=OptimizeRequest)
    except msgspec.ValidationError as exc:
        stream.emit(OptimizeResult(kernel="", error=f"malformed request: {exc}"))
        return 2
    stream.emit(handle(request, stream))
    return 0


if __name__ == "__main__":
    sys.exit(main())
