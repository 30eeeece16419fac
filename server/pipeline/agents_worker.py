"""Running the agents worker (the LLM side: optimize, init) for one editor command: a GPU slot,
work-done progress with Cancel, and a worker killed on cancel. optimize.py and write_kernel.py
differ only in the request they send and what they make of the result."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from kernelblaster.harness.protocol.worker_client import run_worker
from kernelblaster.harness.protocol.worker_failures import WorkerFailed
from kernelblaster.server.editor.configuration import optimize_worker_command
from kernelblaster.server.editor.progress import JobReporter

if TYPE_CHECKING:
    from kernelblaster.server.session.language_server import KernelBlasterServer

Result = TypeVar("Result")


async def run_agents_worker(
    ls: KernelBlasterServer,
    reporter: JobReporter,
    request: msgspec.Struct,
    decoder: msgspec.json.Decoder,
    result_type: type[Result],
    on_progress: Callable[[Any], None],
    *,
    phase: str,
    label: str,
    cwd: Path,
) -> Result | None:
    """The worker's result, or None when the user cancelled through the progress token. The
    reporter has begun (`phase`) and, on a cancel or a failure, ended; a failed worker raises
    WorkerFailed."""
    try:
        await reporter.begin(phase, f"{label}: waiting for the GPU")
        async with ls.jobs.gpu():
            return await run_worker(
                optimize_worker_command(ls.settings),
                request,
                decoder,
                result_type,
                on_progress,
                # Bounded by the request (rollouts × depth, init's attempts) and by the LLM's
                # and the harness's own timeouts; the user can cancel.
                timeout_s=None,
                cwd=cwd,
            )
    except asyncio.CancelledError:
        # Our own cancel path (the progress token) cancelled this request's task: the worker
        # is dead; the command is answered instead of dropped.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        reporter.end("cancelled", f"{label}: cancelled")
        return None
    except WorkerFailed as failure:
        reporter.end("failed", f"{label}: {failure.message}")
        raise
