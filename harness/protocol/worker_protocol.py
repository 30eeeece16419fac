"""The harness worker's protocol: the messages between a caller and the worker process, one
JSON object per line (the optimize worker's are in optimize_protocol.py). Torch-free, so every
process (the language server, the CLI, the optimize loop, the worker itself) imports it;
`worker_client.py` is the one client that speaks both."""

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

# The worker (`python -m kernelblaster.harness.worker`) reads one WorkerRequest as JSON on stdin
# and writes JSON lines on stdout: any number of WorkerProgress, then exactly one WorkerResponse.
# A profile run sends its verification and timing early, in the progress message that starts
# the profile (`check` set), so the caller can show them while ncu runs; the WorkerResponse
# repeats them, with the speedups over PyTorch when those were measured after the profile.
# Where the counters are collected in the worker itself (harness/profile/counters.py), a second
# progress message repeats the check with that profile and its states (`profile`, `states`
# set) while ncu runs for the source lines; the WorkerResponse's profile then replaces it.
# A progress message with `background` set then says that what follows is background work.
# The caller may kill it at any time (cancellation, timeout); a missing WorkerResponse means
# the worker died, which the caller reports as a crash.


# "baselines": only the reference's PyTorch baselines, eager and torch.compile, timed in the
# worker's clean reference process (harness/check/check.py: baselines_apart); nothing of a
# kernel is built or run. The caller starts it early and lets it wait for its turn on the GPU
# (`WorkerProgress.wants_gpu`): torch.compile's compilation runs meanwhile, beside other work.
WorkerTask = Literal["build", "check", "profile", "baselines"]


class WorkerRequest(msgspec.Struct, kw_only=True):
    task: WorkerTask
    source: str  # absolute path of the .cu file
    settings: Settings = msgspec.field(default_factory=Settings)
    depth: ProfileDepth = "quick"
    kernels: list[str] = []  # profile only these kernel names (all of the file's when empty)
    reference: str | None = None  # overrides the reference found beside the source
    sanitize: bool = False  # also run compute-sanitizer (memcheck; racecheck with shared memory)
    # Where the in-process counters give the quick state (harness/profile/counters.py), ncu's
    # pass after them (its rules' estimates, the source lines) runs only for a kernel whose
    # verified median is below this many milliseconds; None: always. The optimize loop asks
    # for it only where the candidate's findings decide its next step (agents/loop/step.py).
    ncu_below_ms: float | None = None
    source_text: str | None = None  # check this text instead of the file's (candidates)
    # Measure the PyTorch baselines when none are cached for the reference (False: cached ones
    # are applied, none measured: the caller measures them apart, task "baselines", and none of
    # its checks holds up its GPU turn for torch.compile's compilation)
    baselines: bool = True
    # task "build" only: build this text as if `source` held it (the editor's unsaved buffer,
    # built ahead of its save so that the save's build is a cache hit; harness/build/nvcc.py)
    unsaved_text: str | None = None


# A spare worker (started before its request exists, harness/protocol/worker_client.py) is told, in
# this environment variable, the request that ran before it, without its texts: it makes that
# request's reference side ahead (harness/worker/reference_ahead.py), used if its own request checks
# the same reference.
EXPECTED_REQUEST_ENV = "KERNELBLASTER_EXPECT"


# A spare started while the worker before it still runs (harness/protocol/worker_client.py) gets, in
# this environment variable, the number of a pipe's read end that it inherited: it imports
# torch meanwhile, but creates no CUDA context (nor anything after it) until that pipe's end
# of file, which comes when the worker before it has exited or when the spare is given its
# request. Nothing of it then runs on the GPU beside another worker's profile. A "baselines"
# worker gets one too: its end of file is its turn on the GPU (`WorkerProgress.wants_gpu`).
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
    # Set on the message after which the run's work is background (ncu's pass, the baselines):
    # its interactive part (build, verification, timing, quick state) has been sent, and the
    # caller may stop the worker for another file's save and run the request again later.
    background: bool = False
    # Task "baselines": what needs no GPU to itself is done (torch.compile's compilation), and
    # the worker now waits for the end of file of its GPU_FREE_FD_ENV pipe before it touches
    # the GPU again: the caller closes the pipe's other end when the GPU is its turn.
    wants_gpu: bool = False


class WorkerResponse(msgspec.Struct, kw_only=True, tag="result"):
    """What the run produced, each part in one place. A run stops at its first failure;
    `error` says which and why (a kernel that fails verification is a `check` result, not an
    error)."""

    build: BuildResult | None = None
    check: CheckResult | None = None  # verification and timing
    profile: ProfileReport | None = None
    # The classifier's verdict on each profiled kernel launch, in `profile.kernels` order.
    states: list[PerfState] = []
    error: HarnessError | None = None


WorkerMessage = WorkerProgress | WorkerResponse
