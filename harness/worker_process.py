"""Running the harness worker (build → verify → time → profile) from any process: its
command, each phase's budget, and its failures turned into a WorkerResponse error, so the CLI,
the optimize loop and the language server all handle one shape."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec

from kernelblaster.harness.records import (
    HarnessError,
    WorkerMessage,
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.harness.worker_client import SpareWorkers, WorkerFailed, run_worker
from kernelblaster.settings import Settings

_decoder = msgspec.json.Decoder(WorkerMessage)
# Past a tool's own timeout, the worker gets this long to report it (with the tool's log)
# before it is presumed hung itself.
_REPORT_GRACE_S = 15.0
_LOG_TAIL = 2000


def worker_command(settings: Settings) -> list[str]:
    return settings.worker_command or [sys.executable, "-m", "kernelblaster.harness.worker"]


def phase_timeout_s(phase: str, settings: Settings) -> float:
    """How long a phase may run before the worker is presumed hung. torch.compile of the
    reference (phase "baseline") is a compilation, so it gets the build budget."""
    if phase in ("build", "baseline"):
        return settings.build_timeout_s + _REPORT_GRACE_S
    if phase in ("profile", "sanitize"):
        return settings.profile_timeout_s + _REPORT_GRACE_S
    return settings.run_timeout_s


def _timeout_advice(phase: str) -> str:
    if phase in ("build", "baseline"):
        return (
            "Compiling took too long: very large sources, heavy templates or torch headers can "
            "take minutes. Raise build_timeout_s (buildTimeoutS in the editor)."
        )
    if phase in ("profile", "sanitize"):
        return (
            "The tool ran too long: profile fewer kernels or launches, use smaller inputs, or "
            "raise profile_timeout_s (profileTimeoutS)."
        )
    return (
        "A kernel that never ends (a loop whose condition never changes, a deadlocked barrier) "
        "is the usual cause; if it is only slow, raise run_timeout_s (runTimeoutS)."
    )


def worker_error(failure: WorkerFailed, settings: Settings) -> HarnessError:
    """What a worker that timed out, died or broke the protocol means for the user."""
    phase = failure.phase or "build"
    log = failure.log[-_LOG_TAIL:]
    if failure.timed_out:
        return HarnessError(
            kind="timeout",
            message=f"The {phase} phase did not finish within "
            f"{phase_timeout_s(phase, settings):.0f} s; the worker was killed.",
            fix=_timeout_advice(phase),
            log=log,
        )
    if failure.exit_status is not None:
        return HarnessError(
            kind="crash",
            message=f"The worker died during {phase} ({failure.exit_status}) without a result.",
            fix="See the log; a segfault in a launcher often means a pointer/size mix-up. Save "
            "(or run the command) again to retry.",
            log=log,
        )
    return HarnessError(
        kind="crash",
        message=f"The worker failed during {phase}: {failure.message}.",
        fix="Check the kernelblaster.workerCommand setting; otherwise this is a bug worth "
        "reporting, with the log.",
        log=log,
    )


async def run_harness(
    request: WorkerRequest,
    settings: Settings,
    *,
    on_progress: Callable[[WorkerProgress], None] = lambda _: None,
    spares: SpareWorkers | None = None,
    cwd: Path | None = None,
) -> WorkerResponse:
    """The worker's response; a worker that dies or overruns a phase becomes a response with
    an error."""
    try:
        return await run_worker(
            worker_command(settings),
            request,
            _decoder,
            WorkerResponse,
            on_progress,
            timeout_s=lambda last: phase_timeout_s(last.phase if last else "build", settings),
            cwd=cwd,
            spares=spares,
            gpu_index=settings.gpu,
        )
    except WorkerFailed as failure:
        return WorkerResponse(error=worker_error(failure, settings))


def run_harness_sync(
    request: WorkerRequest,
    settings: Settings,
    *,
    on_progress: Callable[[WorkerProgress], None] = lambda _: None,
) -> WorkerResponse:
    """`run_harness` for callers without an event loop (the CLI, the optimize loop)."""
    return asyncio.run(run_harness(request, settings, on_progress=on_progress))
