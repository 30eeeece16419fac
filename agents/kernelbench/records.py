"""The records of a KernelBench run: one per problem, the summary of a level, and the results
file (bench/results/kernelbench-<gpu>-<level>.json) that holds them, rewritten after every
problem so that a run cut short keeps what it finished."""

from __future__ import annotations

from typing import Literal

import msgspec

from kernelblaster.harness.protocol.optimize_protocol import PassedOver, PhaseTimes
from kernelblaster.harness.protocol.records import SanitizerRun

# verified: the final kernel passed verification and was timed.
# init_failed: no verified first kernel within the init budget.
# failed: the final kernel did not verify (`detail` says why).
# out_of_memory: the problem can't be checked on this GPU.
# degenerate_reference: verification can't tell a right kernel from a wrong one; never passed.
# bad_reference: the problem file itself fails (import, Model(), get_inputs()).
Status = Literal[
    "verified", "init_failed", "failed", "out_of_memory", "degenerate_reference", "bad_reference"
]  # fmt: skip
Baseline = Literal["eager", "torch.compile"]  # the PyTorch timing a speedup is against


class ProblemResult(msgspec.Struct, kw_only=True):
    problem: str  # the file's stem, e.g. "19_ReLU"
    file: str  # the problem file the run read
    status: Status
    detail: str = ""  # why, for any status but verified; notes (e.g. optimize's error) otherwise
    started_from: Literal["init", "given"] = "init"  # the LLM's first kernel, or a given .cu
    kernel_file: str | None = None  # the final kernel, in the run's work directory
    init_replies: int = 0
    kernel: str | None = None  # the __global__ kernel the loop optimized
    initial_ms: float | None = None  # the first verified kernel
    final_ms: float | None = None  # the final timing of the best kernel
    eager_ms: float | None = None
    compile_ms: float | None = None
    baseline: Baseline | None = None  # the faster of the two
    speedup: float | None = None  # baseline / final: the benchmark's number
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    initial_speedup: float | None = None  # baseline / initial: where the loop started
    optimize_speedup: float | None = None  # initial / final: what the loop gained
    techniques: list[str] = []  # along the best trajectory
    steps: int = 0  # optimization steps taken
    prompt_tokens: int = 0  # every LLM call for this problem: init, lowering, verification...
    completion_tokens: int = 0
    tokens_by_purpose: dict[str, int] = {}
    wall_s: float = 0.0
    # The optimize loop's share of wall_s: its rollouts (their steps, at once), the run's own
    # work besides them (the original's evaluation, the sanitizer run, the policy update), and
    # each step's phases, as `optimize --json` gives them.
    rollouts_wall_s: float = 0.0
    optimize_phases: PhaseTimes | None = None
    step_phases: list[PhaseTimes] = []
    # The rest of wall_s: the given kernel's check (with its full profile and baselines) and the
    # loop's whole wall time; what remains is the runner's own bookkeeping.
    first_phases: PhaseTimes | None = None
    optimize_wall_s: float = 0.0
    # Where the baselines' seconds went, measured apart from the checks (baselines.py); None where
    # the checks measured them.
    baselines_phases: PhaseTimes | None = None
    # Each step's outcome and measured speedup over where it started, in step_phases' order
    # (ncu's pass follows a candidate the rollout goes on from: a success with depth left).
    step_outcomes: list[str] = []
    step_speedups: list[float | None] = []
    # compute-sanitizer's run on the optimize run's offered kernel (None: optimize offered
    # none), and the faster verified candidates it did not adopt, with why (OptimizeResult's)
    sanitizer: SanitizerRun | None = None
    passed_over: list[PassedOver] = []


class Summary(msgspec.Struct, kw_only=True):
    problems: int
    verified: int
    valid_rate: float  # verified / problems
    geomean_speedup: float | None  # over the verified problems
    median_speedup: float | None
    fast_p: dict[str, float]  # "1.5" -> share of all problems verified and faster than 1.5x
    statuses: dict[str, int]
    prompt_tokens: int
    completion_tokens: int
    wall_s: float


class RunConfig(msgspec.Struct, kw_only=True, frozen=True):
    """What must stay the same for a rerun to continue a results file rather than start over."""

    rollouts: int
    depth: int
    top_k: int
    init_attempts: int
    model: str
    mechanics: bool  # the "LLM" is the scripted test server: a mechanics run, not a model's


class KernelBenchRun(msgspec.Struct, kw_only=True):
    format: Literal["kernelblaster-kernelbench"] = "kernelblaster-kernelbench"
    version: int = 1
    device: str  # the GPU's name, e.g. "NVIDIA H100 80GB HBM3"
    level: str  # "level1", or the name of the folder the problems came from
    config: RunConfig
    note: str = ""  # e.g. that the problems are small-sized copies
    estimated_tokens: bool = False  # some endpoint replies had no usage: characters / 4
    problems: list[ProblemResult] = []
    summary: Summary | None = None
