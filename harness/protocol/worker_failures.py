"""How a worker run fails (`WorkerFailed`), the harness worker's phase budgets, and what a failure
means for the user (a HarnessError with a fix), so every caller reports one shape."""

from __future__ import annotations

from kernelblaster.harness.protocol.cuda_errors import DEVICE_FAULT_FIX, device_fault
from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.settings import Settings


class WorkerFailed(Exception):
    """The worker could not be started, broke the protocol, timed out, or died without a
    result. `log` is the tail of its stderr; `phase` the last progress message's, if any."""

    def __init__(
        self,
        message: str,
        *,
        log: str = "",
        timed_out: bool = False,
        phase: str | None = None,
        exit_status: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.log = log
        self.timed_out = timed_out
        self.phase = phase
        self.exit_status = exit_status  # "exit 3", "killed by SIGSEGV"


# Past a tool's own timeout, the worker gets this long to report it (with the tool's log)
# before it is presumed hung itself.
_REPORT_GRACE_S = 15.0
_LOG_TAIL = 2000


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
    if phase == "sanitize":
        # compute-sanitizer runs the kernel in a process of its own: the worker's death or
        # overrun while it waits for the tool says nothing of the kernel's memory accesses.
        what = "ran past its time" if failure.timed_out else f"died ({failure.exit_status})"
        if failure.exit_status is None and not failure.timed_out:
            what = f"failed: {failure.message}"
        return HarnessError(
            kind="sanitizer_failed",
            message=f"The worker {what} while compute-sanitizer checked the kernel: the memory "
            "check has no verdict.",
            fix="See the log; raise profile_timeout_s (profileTimeoutS) if the tool is only "
            "slow, and run `kernelblaster check --sanitize` to retry.",
            log=log,
        )
    if failure.timed_out:
        return HarnessError(
            kind="timeout",
            message=f"The {phase} phase did not finish within "
            f"{phase_timeout_s(phase, settings):.0f} s; the worker was killed.",
            fix=_timeout_advice(phase),
            log=log,
        )
    fault = device_fault(failure.log, cuda_errors_only=True)
    if failure.exit_status is not None and fault is not None:
        # The kernel's fault, though the worker died of it before answering (c10 aborts when
        # a tensor is freed after one): a verdict on the kernel, as its answer would have been.
        return HarnessError(
            kind="illegal_memory_access",
            message=f"The kernel faulted during {phase} ({fault[:300]}); the worker died of it "
            f"({failure.exit_status}).",
            fix=DEVICE_FAULT_FIX,
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
