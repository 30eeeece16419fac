"""Running the harness worker from synchronous code (the CLI, the optimize loop): start it,
stream its progress, kill it on timeout. The language server has its own asyncio client."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import msgspec

from kernelblaster.harness.processes import kill_worker, worker_environment
from kernelblaster.harness.records import (
    HarnessError,
    WorkerMessage,
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.settings import Settings

_decoder = msgspec.json.Decoder(WorkerMessage)
_EXIT_GRACE_S = 10.0  # how long a worker that has answered gets to exit on its own


def worker_command(settings: Settings) -> list[str]:
    # -P: don't put the working directory on sys.path. Run from a checkout of this repository,
    # its top-level `kernelblaster/` folder would shadow the installed package's subpackages.
    return settings.worker_command or [sys.executable, "-P", "-m", "kernelblaster.harness.worker"]


# Past a tool's own timeout, the worker gets this long to report it (with the tool's log)
# before it is presumed hung itself.
_REPORT_GRACE_S = 15.0


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


def run_worker(
    request: WorkerRequest,
    settings: Settings,
    *,
    on_progress: Callable[[WorkerProgress], None] = lambda _: None,
) -> WorkerResponse:
    """The worker's response; a worker that dies or overruns becomes a response with an error."""
    process = subprocess.Popen(
        worker_command(settings),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=worker_environment(),
        start_new_session=True,  # its own process group, killed as one
    )
    assert process.stdin and process.stdout and process.stderr
    process.stdin.write(msgspec.json.encode(request))
    process.stdin.close()
    stderr_chunks: list[bytes] = []
    drain = threading.Thread(target=lambda: stderr_chunks.append(process.stderr.read()))
    drain.start()
    killed = threading.Event()
    last_phase = "build"
    deadline = time.monotonic() + phase_timeout_s(last_phase, settings)
    finished = threading.Event()

    def watchdog() -> None:
        while not finished.wait(0.1):
            if process.poll() is not None:
                # The worker is gone. Children it left (a compile pool, a program it ran) must
                # not keep the pipes open: a crash would be read as a hang.
                kill_worker(process)
                return
            if time.monotonic() > deadline:
                killed.set()
                kill_worker(process)
                return

    threading.Thread(target=watchdog, daemon=True).start()
    response: WorkerResponse | None = None
    garbled: list[str] = []
    try:
        for line in process.stdout:
            try:
                message = _decoder.decode(line)
            except msgspec.DecodeError as exc:
                # The worker keeps fd 1 for the protocol, so this is a bug, not user output.
                garbled.append(f"unreadable worker message ({exc}): {line[:300]!r}")
                continue
            if isinstance(message, WorkerProgress):
                last_phase = message.phase
                deadline = time.monotonic() + phase_timeout_s(last_phase, settings)
                on_progress(message)
            else:
                response = message
                # The answer is in. Stop reading: a child the worker left behind (a compile
                # pool, a program it ran) may hold the pipe open long after the worker exits.
                break
    finally:
        finished.set()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_EXIT_GRACE_S)
        # Also after a normal exit: whatever the worker left running in its group goes too.
        kill_worker(process)
        process.wait()
        drain.join()
    if response is not None:
        return response
    stderr = "\n".join([*garbled, b"".join(stderr_chunks).decode("utf-8", "replace")])
    if killed.is_set():
        return WorkerResponse(
            error=HarnessError(
                kind="timeout",
                message=f"The {last_phase} phase did not finish within "
                f"{phase_timeout_s(last_phase, settings):.0f} s; "
                "the worker was killed.",
                fix=_timeout_advice(last_phase),
                log=stderr[-2000:],
            )
        )
    return WorkerResponse(
        error=HarnessError(
            kind="crash",
            message=f"The worker died during {last_phase} (exit {process.returncode}).",
            fix="See the log; a segfault in a launcher often means a pointer/size mix-up.",
            log=stderr[-2000:],
        )
    )
