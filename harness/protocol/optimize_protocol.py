"""The optimize worker's protocol, shared by the loop, the worker, the CLI and the language server:
one OptimizeRequest on stdin, then OptimizeProgress lines and exactly one OptimizeResult. The
caller may kill the worker at any time; the KB keeps every attempt recorded so far. The loop
returns the OptimizeResult itself, passed on as it is, and each OptimizeStep is what the KB's
Attempt row is made from. Torch-free and free of the LLM stack, for the server."""

from __future__ import annotations

from typing import Literal

import msgspec

from kernelblaster.harness.protocol.records import CheckResult, SanitizerRun
from kernelblaster.settings import Settings


class OptimizeRequest(msgspec.Struct, kw_only=True, tag="optimize"):
    source: str  # absolute path of the .cu file
    source_text: str  # the document's text the optimization starts from
    kernel: str
    technique: str | None = None  # force this technique for the first step; KB-sampled if None
    rollouts: int = 4
    depth: int = 3
    top_k: int = 3
    seed: int | None = None
    # The selection (kb.ranking.select): the best prediction first, never the same failure twice on
    # one kernel, and on a revisited kernel the technique most likely to beat the run's fastest
    # kernel (docs/learning.md).
    temperature: float = 0.0  # of the weighted random top-k selection; 0: the best first
    # the prediction's uncertainty the expected improvement integrates over, in its standard
    # deviations (1: as predicted); 0: the best prediction on every visit
    exploration: float = 1.0
    avoid_failed: bool = True  # skip techniques that already failed on a step's starting kernel
    # New techniques asked of the LLM at most, at once, for a state the KB has none left for
    # (agents/policy/proposals.py); 0: never propose.
    proposals: int = 3
    settings: Settings = msgspec.field(default_factory=Settings)


class OptimizeProgress(msgspec.Struct, kw_only=True, tag="progress"):
    step: int  # 1-based, out of `total`
    total: int
    message: str  # e.g. "rollout 2 step 1: shared_memory_tiling predicted 2.1x, measured 1.7x"
    best_speedup: float | None = None


class LaunchedKernel(msgspec.Struct, kw_only=True):
    """One kernel a candidate launched, as profiled: a rewrite may rename, split, fuse or add
    kernels, and all of them are kept in the step's record."""

    name: str
    time_share: float  # of the profiled GPU time of all the candidate's launches, 0..1
    state: str  # the classifier's state of its longest launch
    launches: int = 1


class Span(msgspec.Struct, kw_only=True):
    """One interval of a step on the wall clock (time.time(), comparable across one host's
    processes): waiting for the LLM, holding a GPU for an evaluation, or "cpu" work beside them
    (the baselines' compilation). Concurrent rollouts' spans show how LLM waits and GPU work
    overlap."""

    kind: Literal["llm", "gpu", "cpu"]
    start: float
    end: float
    gpu: int | None = None  # the GPU held ("gpu" spans)


class PhaseTimes(msgspec.Struct, kw_only=True):
    """Where the wall time of a step (or of a run's own work besides its steps) went, in seconds.
    `llm_wait` and `soft_verify` are the LLM's, the rest the harness's and the loop's, summed
    over every candidate the step checked. `evaluation`: those runs from the GPU being granted;
    `gpu_queue`: the wait for it; `reference`: the reference side's time not hidden behind the
    build (agents/loop/evaluation.py reads each part)."""

    llm_wait: float = 0.0  # the lowering agent's replies, every retry's
    gpu_queue: float = 0.0
    evaluation: float = 0.0
    build: float = 0.0
    reference: float = 0.0
    verify: float = 0.0
    timing: float = 0.0
    quick_profile: float = 0.0  # the in-process counters (harness/profile/counters.py)
    full_profile: float = 0.0  # ncu (harness/profile/ncu.py)
    baselines: float = 0.0  # PyTorch eager and torch.compile (cached per reference and GPU)
    sanitize: float = 0.0  # compute-sanitizer (the best candidate's, at the end of a run)
    soft_verify: float = 0.0  # the soft verifier's LLM call
    policy_update: float = 0.0  # the policy update's LLM calls (a run's, not a step's)
    kb_write: float = 0.0
    # The worker's finer seconds inside the phases above, by name, summed like them: the check's
    # (CheckResult.phase_seconds) and ncu's (harness/profile/).
    parts: dict[str, float] = {}
    spans: list[Span] = []

    @property
    def llm_s(self) -> float:
        """Seconds spent waiting for the LLM."""
        return self.llm_wait + self.soft_verify + self.policy_update

    def add(self, other: PhaseTimes) -> None:
        """Add `other`'s seconds and spans to these."""
        for name in self.__struct_fields__:
            if name not in ("spans", "parts"):
                setattr(self, name, round(getattr(self, name) + getattr(other, name), 4))
        parts = dict(self.parts)
        for name, seconds in other.parts.items():
            parts[name] = round(parts.get(name, 0.0) + seconds, 4)
        self.parts = parts
        self.spans = [*self.spans, *other.spans]


class OptimizeStep(msgspec.Struct, kw_only=True):
    """One step of one rollout: the technique tried on the kernel the rollout stood at, what the
    ranking predicted, and the evaluated verdict."""

    rollout: int  # 0-based
    depth: int  # 0-based step within the rollout
    technique: str
    state_before: str
    predicted_speedup: float
    outcome: str  # kb.records.Outcome: success, regression, rejected, wrong_result, error, ...
    measured_speedup: float | None = None  # candidate vs where the step started, when verified
    # the candidate's state after re-profiling, when verified: its dominant kernel's by GPU time
    state_after: str | None = None
    kernels_after: list[LaunchedKernel] = []  # every kernel it launched, dominant first
    detail: str = ""  # the verifier's message, or why no candidate came out of the step
    prompt_tokens: int = 0
    completion_tokens: int = 0
    source_hash: str  # code_hash of the kernel the step started from
    candidate_hash: str = ""  # code_hash of the verified candidate; "" when none
    # "LLM", "harness", "unusable_reply"; a best candidate rejected at the end of the run:
    # "sanitizer" (compute-sanitizer found memory errors or races), "final_check" (it failed
    # its check on fresh inputs then)
    error_kind: str | None = None
    # the kernel's finding the technique was aimed at ("" none; kb Attempt.target_finding)
    target_finding: str | None = None
    fatal: bool = False  # the LLM or the harness is unavailable: later steps would fail too
    # Kept although not faster because its technique is an enabler (kb catalog `[[enabler]]`):
    # measured_speedup and outcome are then those of the best candidate reached from it later
    # in the rollout, vs where this step started.
    enabler: bool = False
    phases: PhaseTimes = msgspec.field(default_factory=PhaseTimes)


class ProposalVerdict(msgspec.Struct, kw_only=True):
    """A technique the LLM proposed for a state the KB had none left for
    (agents/policy/proposals.py), and whether it entered the KB or why not."""

    state: str
    technique: str  # its id; "" when the item had none
    accepted: bool
    reason: str = ""  # why it was rejected (schema, bounds, a secret or code, a duplicate)
    item: str = ""  # a rejected item's JSON, truncated


class PassedOver(msgspec.Struct, kw_only=True):
    """A verified candidate faster than the one a run adopted that was not adopted, and why."""

    rollout: int  # 0-based, as OptimizeStep's
    depth: int
    technique: str  # of the step that made it
    time_ms: float  # as its step timed it
    speedup: float  # over the original, as its step timed it
    reason: str  # e.g. what compute-sanitizer found in it

    @property
    def summary(self) -> str:
        return (
            f"{self.speedup:.2f}x candidate of rollout {self.rollout + 1} step {self.depth + 1} "
            f"({self.technique}) not adopted: {self.reason}"
        )


class OptimizeResult(msgspec.Struct, kw_only=True, tag="result"):
    """The run's result, from the loop to the editor."""

    kernel: str
    arch: str = ""
    # A verified candidate faster than the original is offered (best_source): one that passed
    # compute-sanitizer, or one it could not check for a reason of the machine or the harness
    # (`sanitizer` says which)
    improved: bool = False
    best_source: str | None = None  # full text of the best verified candidate
    best_time_ms: float | None = None
    # The best candidate's check in its compute-sanitizer run: verified again on fresh inputs,
    # timed, with the baselines: its final timing (the KernelBench runner's), made once.
    best_check: CheckResult | None = None
    original_time_ms: float | None = None
    speedup: float | None = None  # vs the original kernel
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    techniques: list[str] = []  # applied along the best trajectory
    steps: list[OptimizeStep] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cancelled: bool = False
    policy_notes: int = 0  # KB notes the policy update wrote
    proposals: list[ProposalVerdict] = []  # techniques proposed during the run, kept or not
    # Why the run could not complete (LLM unreachable, no GPU, ...). After an improvement it can
    # only say that the policy update was skipped: the candidate stands.
    error: str | None = None
    # The run's own work besides its steps' (the original's evaluation, compute-sanitizer on
    # the best candidate, the policy update), and the wall seconds of the whole run and of its
    # rollouts (the steps, run at once where rollouts share GPUs or use several).
    phases: PhaseTimes = msgspec.field(default_factory=PhaseTimes)
    wall_s: float = 0.0
    rollouts_wall_s: float = 0.0
    # compute-sanitizer's run on the offered candidate (None when none is offered): passed, or
    # not_run with why and its fix (the candidate is then "not checked for memory errors")
    sanitizer: SanitizerRun | None = None
    # Every verified candidate faster than the offered one (or than the original, when none is
    # offered) that was not adopted, with why: never dropped silently
    passed_over: list[PassedOver] = []

    @property
    def message(self) -> str:
        """One line for the user, to follow the kernel's name."""
        if self.improved and self.speedup is not None:
            text = (
                f"{self.speedup:.2f}x faster ({' → '.join(self.techniques)}), verified on "
                f"fresh inputs; {self._memory}"
            )
        else:
            text = self.error or "no verified candidate beat the original"
        return "; ".join([text, *(p.summary for p in self.passed_over)])

    @property
    def warning(self) -> str:
        """What the user must know before taking the result, or "": the offered candidate was
        not checked for memory errors, or faster ones were passed over."""
        notes = [p.summary for p in self.passed_over]
        if self.improved and (self.sanitizer is None or self.sanitizer.status != "passed"):
            notes.insert(0, self._memory)
        return "; ".join(notes)

    @property
    def _memory(self) -> str:
        return self.sanitizer.summary if self.sanitizer else "not checked for memory errors"


OptimizeMessage = OptimizeProgress | OptimizeResult
