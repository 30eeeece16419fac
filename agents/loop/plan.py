"""What one optimize run's rollouts share and give back: the plan (plain data, so a rollout can
run in another process or host), the live services of a process, a rollout's result, where a
rollout stands (VerifiedKernel), and the speedup a step must reach to count."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from kernelblaster.agents.llm.client import LlmClient
from kernelblaster.agents.llm.lowering import LoweringResult
from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.agents.loop.in_flight import InFlight
from kernelblaster.harness.protocol.optimize_protocol import (
    LaunchedKernel,
    OptimizeRequest,
    OptimizeStep,
    ProposalVerdict,
)
from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.harness.target.targets import Target
from kernelblaster.kb.records import (
    Attempt,
)
from kernelblaster.kb.store import KnowledgeBase

# A verified candidate must beat the kernel it started from by this factor to count as a
# success: smaller differences are within the timing spread of a median over trials.
MIN_SPEEDUP = 1.02
# Credit per step of what a kept step enables: the chained speedup counts as chained**discount
# (1: as much as the step's own; 0: not at all).
CHAIN_DISCOUNT = 0.9
Evaluate = Callable[..., Evaluation]
Lower = Callable[..., LoweringResult]  # lower()'s signature; the replay mode scripts it
# The techniques the lowering agent can apply to a kernel (its source); None: every one.
Offered = Callable[[str], Collection[str] | None]


class VerifiedKernel(msgspec.Struct, kw_only=True):
    """A verified kernel version: where a rollout stands."""

    source: str
    time_ms: float
    state: PerfState  # its dominant kernel's (the original: the kernel the user chose)
    kernels: list[LaunchedKernel] = []  # every kernel it launches, dominant first
    techniques: list[str] = []
    eager_ms: float | None = None
    compile_ms: float | None = None
    made_by: OptimizeStep | None = None  # the step that produced it; None for the original


class RolloutPlan(msgspec.Struct, kw_only=True):
    """What every rollout of one optimize run shares; plain data, so it can be sent to another
    process or host. `request.settings` names the GPU the rollout runs on."""

    request: OptimizeRequest
    origin: VerifiedKernel
    target: Target
    reference_text: str
    constraints: list[str]

    @property
    def source(self) -> Path:
        return Path(self.request.source)

    def on_gpu(self, gpu: int) -> RolloutPlan:
        """This plan with its rollouts' harness work on GPU `gpu`."""
        settings = msgspec.structs.replace(self.request.settings, gpu_index=gpu)
        request = msgspec.structs.replace(self.request, settings=settings)
        return msgspec.structs.replace(self, request=request)


class RolloutResult(msgspec.Struct, kw_only=True):
    rollout: int
    steps: list[OptimizeStep] = []
    verified: list[VerifiedKernel] = []  # the candidates that beat where their step started
    attempts: list[Attempt] = []  # as recorded in the KB
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cancelled: bool = False
    error: str | None = None  # the LLM or the harness became unavailable
    proposals: list[ProposalVerdict] = []


def every_technique(source: str) -> None:
    return None


class SearchRecord:
    """What one run's rollouts have found, in this process: the fastest verified time, which a
    technique tried on a revisited kernel must beat to add anything (kb.ranking.select), and the
    kernels with nothing left to try, whose branch is not walked again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.best_ms = math.inf
        self.exhausted: set[str] = set()

    def verified(self, time_ms: float) -> None:
        with self._lock:
            self.best_ms = min(self.best_ms, time_ms)

    def behind(self, time_ms: float) -> float:
        """How far, in log speedup, a kernel of `time_ms` is behind the fastest found."""
        return max(0.0, math.log(time_ms / self.best_ms)) if self.best_ms < math.inf else 0.0


@dataclass(frozen=True)
class RolloutServices:
    """The live objects a rollout uses, shared by the rollouts of one process."""

    client: LlmClient
    kb: KnowledgeBase
    evaluate: Evaluate
    lower: Lower
    cancelled: Callable[[], bool]
    # after each step: a line saying what happened, and the time of a new verified candidate
    report: Callable[[str, float | None], None]
    in_flight: InFlight = field(default_factory=InFlight)  # steps out, of rollouts run at once
    # Held while a rollout asks for proposals: rollouts run at once that reach the same state
    # on the same source then see the first one's proposals in the KB instead of asking again
    # (and validating against a KB that does not have them yet).
    proposing: threading.Lock = field(default_factory=threading.Lock)
    offered: Offered = every_technique  # the replay's; live rollouts (any process) offer all
    search: SearchRecord = field(default_factory=SearchRecord)


RunRollouts = Callable[[RolloutPlan, int, RolloutServices], list[RolloutResult]]
# (steps done, steps in all, what happened, the best speedup so far)
OnProgress = Callable[[int, int, str, float | None], None]
