"""The harness worker's protocol: one JSON object per line between a caller and the worker.
Torch-free, so every process imports it; `worker_client.py` is its one client."""

from __future__ import annotations

from typing import Literal

import msgspec

from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    PerfState,
    ProfileDepth,
    ProfileReport,
)
from kernelblaster.settings import Settings

# The worker reads one WorkerRequest on stdin and writes JSON lines: any number of WorkerProgress,
# then exactly one WorkerResponse; none means it crashed. A profile run sends its check early, so
# the caller can show it while ncu runs. The caller may kill the worker at any time.


# "baselines": only the reference's eager and torch.compile timings, in the clean reference process;
# no kernel is built. It starts early and waits for its GPU turn (`WorkerProgress.wants_gpu`) so
# torch.compile compiles meanwhile.
WorkerTask = Literal["build", "check", "profile", "baselines"]


class WorkerRequest(msgspec.Struct, kw_only=True):
    task: WorkerTask
    source: str  # absolute path of the .cu file
    settings: Settings = msgspec.field(default_factory=Settings)
    depth: ProfileDepth = "quick"
    kernels: list[str] = []  # profile only these kernel names (all of the file's when empty)
    reference: str | None = None  # overrides the reference found beside the source
    sanitize: bool = False  # also run compute-sanitizer (memcheck; racecheck with shared memory)
    # With in-process counters, ncu's pass (its rules' estimates, the source lines) runs only for a
    # kernel whose verified median is below this many ms; None: always.
    ncu_below_ms: float | None = None
    source_text: str | None = None  # check this text instead of the file's (candidates)
    # Measure the PyTorch baselines when none are cached (False: the caller measures them apart,
    # task "baselines", so no check holds up its GPU turn for torch.compile).
    baselines: bool = True
    # task "build" only: build this text as if `source` held it (the editor's unsaved buffer, built
    # ahead so the save's build is a cache hit).
    unsaved_text: str | None = None


# A spare worker is told here the request that ran before it, without its texts: it makes that
# request's reference side ahead, used if its own request checks the same reference.
EXPECTED_REQUEST_ENV = "KERNELBLASTER_EXPECT"


# A spare started while the worker before it runs inherits a pipe's read end, named here: it imports
# torch meanwhile but touches the GPU only at that pipe's end of file (the worker before it exited,
# or the spare got its request). A "baselines" worker's end of file is its GPU turn.
GPU_FREE_FD_ENV = "KERNELBLASTER_GPU_FREE_FD"


def expected_request_env(request: WorkerRequest) -> dict[str, str]:
    """The environment telling a spare to expect a request like `request`; none for a build,
    which needs no reference."""
    if request.task == "build":
        return {}
    hint = msgspec.structs.replace(request, source_text=None, unsaved_text=None)
    return {EXPECTED_REQUEST_ENV: msgspec.json.encode(hint).decode()}


class WorkerProgress(msgspec.Struct, kw_only=True, tag="progress"):
    phase: Literal["build", "verify", "time", "baseline", "sanitize", "profile"]
    message: str
    percent: int | None = None
    # The results so far, once verification and timing are known (phase "profile"):
    # the run's build and its check, its speedups missing when the baselines are not cached.
    build: BuildResult | None = None
    check: CheckResult | None = None
    # The in-process counters' profile and its states, ahead of ncu's (phase "profile").
    profile: ProfileReport | None = None
    states: list[PerfState] = []
    # Set on the message after which the work is background (ncu's pass, the baselines): the caller
    # may stop the worker for another file's save and rerun the request later.
    background: bool = False
    # Task "baselines": torch.compile's compilation is done, and the worker waits for its
    # GPU_FREE_FD_ENV pipe's end of file (the caller's go-ahead) before it touches the GPU.
    wants_gpu: bool = False


class WorkerResponse(msgspec.Struct, kw_only=True, tag="result"):
    """What the run produced, each part in one place. A run stops at its first failure, which
    `error` names (a kernel that fails verification is a `check` result, not an error)."""

    build: BuildResult | None = None
    check: CheckResult | None = None  # verification and timing
    profile: ProfileReport | None = None
    # The classifier's verdict on each profiled kernel launch, in `profile.kernels` order.
    states: list[PerfState] = []
    error: HarnessError | None = None


WorkerMessage = WorkerProgress | WorkerResponse
