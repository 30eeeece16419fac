"""Records that cross the harness boundary (worker pipe, cache files, CLI JSON, server).

Lines and columns are 1-based, as compilers print them; the server converts to LSP's 0-based.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Severity = Literal["error", "warning", "info", "hint"]

# Why a harness step could not produce a result. Each kind comes with a message and a fix.
ErrorKind = Literal[
    "nvcc_missing",
    "ncu_missing",
    "no_gpu",
    "no_driver",
    "wrong_arch",
    "counter_permission",
    "ncu_replay_failed",
    # another profiler held the GPU's performance counters (harness/protocol/profiling_lock.py)
    "profiler_busy",
    # the in-process counters (harness/profile/counters.py) failed: profile through ncu
    "counters_failed",
    "build_failed",
    "no_reference",
    "bad_reference",
    "bad_target",
    "entry_missing",
    "shape_mismatch",
    "timeout",
    "illegal_memory_access",
    "crash",
    "torch_missing",
    "golden_missing",
    "cancelled",
    "out_of_memory",
    # a folder KernelBlaster writes to could not be made or written (kernelblaster/folders.py)
    "setup_path",
    # compute-sanitizer is missing or could not reach a verdict: not a verdict on the kernel, which
    # is then "not checked for memory errors"
    "sanitizer_missing",
    "sanitizer_failed",
    # the harness's own code failed where no candidate code runs: a bug of KernelBlaster
    "internal",
    # a Python package we need (not torch) is not importable in the worker: an install problem,
    # never the kernel's
    "dependency_missing",
]

# Error kinds fixed in the setup (the machine, its tools, the kernel's pairing with its reference),
# not in the program: the editor shows them as `setup` diagnostics.
SETUP_ERROR_KINDS: frozenset[ErrorKind] = frozenset(
    {
        "nvcc_missing",
        "ncu_missing",
        "no_gpu",
        "no_driver",
        "wrong_arch",
        "counter_permission",
        "profiler_busy",
        "no_reference",
        "bad_reference",
        "bad_target",
        "entry_missing",
        "torch_missing",
        "golden_missing",
        "setup_path",
        "sanitizer_missing",
        "dependency_missing",
    }
)
# Setup errors that are expected where they happen (no GPU on this machine): said once, quietly.
EXPECTED_ERROR_KINDS: frozenset[ErrorKind] = frozenset(
    {"no_gpu", "no_driver", "no_reference", "ncu_missing"}
)
# Error kinds that say this machine can run no kernel at all (or the user stopped): a batch stops
# instead of failing every problem alike.
MACHINE_ERROR_KINDS: frozenset[ErrorKind] = frozenset(
    {
        "no_gpu",
        "no_driver",
        "torch_missing",
        "nvcc_missing",
        "wrong_arch",
        "cancelled",
        "setup_path",
        "dependency_missing",
    }
)


class HarnessError(msgspec.Struct, kw_only=True):
    kind: ErrorKind
    message: str
    fix: str = ""
    kernel: str | None = None  # the kernel involved, when known (e.g. an illegal address)
    log: str = ""  # tail of the tool's output, for the curious


class SourcePosition(msgspec.Struct, kw_only=True):
    file: str
    line: int
    column: int = 0  # 0: the tool gave no column


class SourceDiagnostic(msgspec.Struct, kw_only=True):
    """A compiler (or other tool) message pinned to a source position."""

    file: str
    line: int
    column: int = 0  # 0: the tool gave no column
    severity: Severity
    message: str
    code: str | None = None  # e.g. nvcc's "20039-D", or a finding id
    # Where the tool reported it, when that is another file (a header): `file` and `line` are then
    # the source's line that leads there (the #include, the template's instantiation).
    reported_at: SourcePosition | None = None
    # What to do about it, for a failure whose remedy is known (harness/build/fix_hints.py).
    fix: str = ""


class KernelResources(msgspec.Struct, kw_only=True):
    """What ptxas reports for one kernel, plus theoretical occupancy derived from it."""

    name: str  # mangled, as ptxas prints it
    demangled: str
    arch: str  # e.g. "sm_90"
    registers: int
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    shared_bytes: int = 0  # static shared memory per block
    constant_bytes: int = 0
    max_threads_per_block: int | None = None  # from __launch_bounds__, when ptxas says so
    # Theoretical occupancy at `occupancy_block_size` threads per block (resident warps per SM
    # over the SM's maximum), and the resource that limits it.
    occupancy_block_size: int = 256
    theoretical_occupancy: float | None = None
    occupancy_limiter: Literal["registers", "shared_memory", "block_size", "warps"] | None = None


class BuildStep(msgspec.Struct, kw_only=True):
    """One compiler run of a build made in parts: a source compiled to its own object, or the link.
    Each is cached on its own, so an edit recompiles only the source it touched."""

    what: str  # the source compiled, or "link"
    artifact: str | None = None  # the object or linked file (in the build cache)
    cached: bool = False
    seconds: float = 0.0
    command: list[str] = []


class BuildResult(msgspec.Struct, kw_only=True):
    ok: bool
    source: str
    artifact: str | None = None  # the built shared library or executable
    arch: str
    command: list[str] = []  # the nvcc command that compiled `source`
    diagnostics: list[SourceDiagnostic] = []
    resources: list[KernelResources] = []
    cached: bool = False
    seconds: float = 0.0
    key: str = ""  # content hash of every input
    error: HarnessError | None = None
    arch_note: str = ""  # how the arch was chosen, e.g. "no GPU found ...; compiling for sm_90"
    steps: list[BuildStep] = []  # for a build made in parts: each compile, then the link
    # Milliseconds per stage of the nvcc runs that made it (`nvcc --time`: "cudafe++", "cicc",
    # "ptxas", "gcc (compiling)", ...; a stage run twice is summed); empty when it was cached.
    nvcc_stages_ms: dict[str, float] = {}


class Mismatch(msgspec.Struct, kw_only=True):
    """Where a candidate's output differs. JSON has no NaN or infinity, so a non-finite value
    travels as None (an unwritten, NaN-poisoned element shows up as `actual: None`)."""

    output: int  # which output tensor
    trial: int
    seed: int
    max_abs_error: float | None
    max_rel_error: float | None
    first_bad_index: list[int]
    expected: float | None
    actual: float | None
    bad_elements: int
    total_elements: int
    nonfinite: int  # NaN/Inf in the candidate's output (unwritten elements show up as NaN)
    # Set when the inputs were get_inputs()' scaled by this factor, which a degenerate
    # reference needs before its outputs tell a right kernel from a wrong one.
    input_scale: float | None = None


# Reward hacking, each named only on runtime evidence: what the candidate did when it ran.
HackKind = Literal[
    "calls_library",  # launched kernels it doesn't define (cuBLAS/cuDNN/torch ops)
    "no_kernel_launched",
    "output_cached",  # the previous output again, for new inputs or inputs changed in place
    "side_stream",  # work not ordered inside the caller's stream: it escapes the timed region
    "output_aliased",  # returned an input's memory, or the memory of an earlier output
    "modifies_inputs",  # wrote into its inputs (the reference doesn't)
    "monkey_patch",  # replaced a timer, torch.cuda.synchronize or another harness function
    "reads_reference",  # called the reference model
    # the reference computes something else in the candidate's process than in a process where
    # no candidate code ever ran (an ATen kernel, a dispatch mode or the Model replaced)
    "reference_tampered",
    "memcheck",  # compute-sanitizer memcheck: out-of-bounds or misaligned access
    "racecheck",  # compute-sanitizer racecheck: shared-memory data race
]

# Warnings never fail a verification on their own: patterns in the source (a stream API, a
# library call, a catch-all handler, the reference's name) that the runtime checks then
# confirm or not, and a reference whose outputs are too degenerate to tell kernels apart.
WarningKind = Literal[
    "side_stream", "calls_library", "swallowed_exception", "reads_reference", "weak_reference"
]


class HackFinding(msgspec.Struct, kw_only=True):
    kind: HackKind
    message: str
    line: int | None = None  # in the candidate's source, when known


class VerifyWarning(msgspec.Struct, kw_only=True):
    kind: WarningKind
    message: str
    line: int | None = None  # in the candidate's source, when known
    # e.g. weak_reference: {"output": 0, "zero_fraction": 0.98, "constant_fraction": 0.98}
    evidence: dict[str, float] = {}


class VerifyResult(msgspec.Struct, kw_only=True):
    ok: bool
    trials: int
    seeds: list[int] = []
    atol: float
    rtol: float
    mismatches: list[Mismatch] = []
    hacks: list[HackFinding] = []
    warnings: list[VerifyWarning] = []
    message: str = ""  # one line a person can act on


# passed: no finding; failed: memory errors or races found in the kernel (its verdict);
# not_run: the tool could not run to a verdict, for a reason of the machine or the harness
SanitizerStatus = Literal["passed", "failed", "not_run"]


class SanitizerRun(msgspec.Struct, kw_only=True):
    """compute-sanitizer's run on a kernel (`check --sanitize`; an optimize run's best candidate):
    its verdict, the tools that ran, on which inputs, in how many seconds."""

    status: SanitizerStatus
    reason: str = ""  # failed: what it found; not_run: why it could not run
    fix: str = ""  # not_run: what to do about it
    tools: list[str] = []  # those that ran to their verdict: memcheck, racecheck
    inputs: str = ""  # e.g. "get_inputs() at batch_size 32 instead of 512"
    seconds: float = 0.0  # the whole sanitizer step, its set-up included

    @property
    def summary(self) -> str:
        """One line for the user, e.g. "memcheck, racecheck passed on get_inputs() at ..."."""
        if self.status == "not_run":
            return f"not checked for memory errors: {self.reason} {self.fix}".strip()
        verdict = "passed" if self.status == "passed" else f"found {self.reason}"
        return f"compute-sanitizer {', '.join(self.tools)} {verdict} on {self.inputs}"


class Timing(msgspec.Struct, kw_only=True):
    median_ms: float
    min_ms: float
    max_ms: float
    p20_ms: float
    p80_ms: float
    repetitions: int


class CheckResult(msgspec.Struct, kw_only=True):
    """verify + time for one built target on one GPU (the build and any error that stopped the
    check are the worker response's)."""

    source: str
    target_kind: str
    gpu: str | None = None  # device name, e.g. "NVIDIA H100 80GB HBM3"
    arch: str | None = None
    verify: VerifyResult | None = None
    timing: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = None  # torch.compile of the reference
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    phase_seconds: dict[str, float] = {}
    sanitizer: SanitizerRun | None = None  # when the check ran compute-sanitizer


# --- profiling ---------------------------------------------------------------------------


class RuleResult(msgspec.Struct, kw_only=True):
    """One result of an ncu rule (its message stripped of ncu's markup)."""

    id: str  # e.g. "UncoalescedGlobalAccess"
    section: str
    type: Literal["ok", "info", "warning", "error", "optimization"]
    title: str
    message: str
    estimated_speedup: float | None = None  # percent, as ncu states it
    speedup_kind: Literal["global", "local"] | None = None


class SourceMarker(msgspec.Struct, kw_only=True):
    """An ncu source-level finding attached to a line of the user's source."""

    file: str
    line: int
    rule: str
    kind: Literal["info", "warning", "optimization"]
    message: str


class LaunchConfig(msgspec.Struct, kw_only=True):
    grid: list[int]  # x, y, z
    block: list[int]
    registers_per_thread: int
    shared_static_bytes: int = 0
    shared_dynamic_bytes: int = 0
    waves_per_sm: float | None = None


class KernelProfile(msgspec.Struct, kw_only=True):
    name: str  # function name, e.g. "softmax_rowthread"
    demangled: str  # full signature
    duration_ns: float | None = None
    launch: LaunchConfig
    metrics: dict[str, float] = {}
    rules: list[RuleResult] = []
    markers: list[SourceMarker] = []


ProfileDepth = Literal["quick", "full"]  # ncu's sections: a quick pass's few, or all of them
ProfiledProgram = Literal["native_driver", "run_once", "program", "in_process"]


class ProfileReport(msgspec.Struct, kw_only=True):
    device: str
    arch: str  # e.g. "sm_90"
    depth: ProfileDepth
    report_path: str | None = None
    kernels: list[KernelProfile] = []
    seconds: float = 0.0
    # The process profiled: a plain target's native driver, run_once (`fallback_reason` says why,
    # for a plain target), or the program; "in_process" for CUPTI counters in the worker; None for a
    # report read on its own (`kernelblaster analyze`).
    program: ProfiledProgram | None = None
    fallback_reason: str = ""
    # Where `seconds` went, by phase, where the profiler says (e.g. "replay", "decode").
    phase_seconds: dict[str, float] = {}


# --- classification ------------------------------------------------------------------------
# What the classifier (harness/analysis/classify.py) says about one profiled kernel, and why.

Bottleneck = Literal["memory", "compute", "latency", "occupancy", "launch"]

# Bumped whenever classification rules change, so cached states and KB rows say which classifier
# made them.
STATE_VERSION = 4


class Finding(msgspec.Struct, kw_only=True):
    id: str  # e.g. "uncoalesced_global_access"
    evidence: dict[str, float] = {}  # the metric values that support it
    estimated_speedup: float | None = None  # percent, from ncu's rule when it gives one
    lines: list[int] = []  # source lines ncu blames, in the kernel's own file
    message: str = ""


# sm_throughput: the SM's speed of light, the roof of a compute-bound kernel whose pipes don't
# show which one binds it
Roof = Literal["dram_bandwidth", "fp32", "fp16_tensor", "fp64", "sm_throughput", "none"]


class Headroom(msgspec.Struct, kw_only=True):
    roof: Roof
    achieved_fraction: float  # achieved over the roof's peak, 0..1


class PerfState(msgspec.Struct, kw_only=True):
    kernel: str
    arch: str
    bottleneck: Bottleneck
    state: str  # e.g. "memory.dram", "memory.l1", "latency.long_scoreboard"
    summary: str  # one line a person understands
    findings: list[Finding] = []
    headroom: Headroom | None = None
    near_limit: bool = False
    metrics: dict[str, float] = {}  # the key metrics shown in hover
    version: int = STATE_VERSION
