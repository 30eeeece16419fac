"""Typed records of the knowledge base: catalog entries, the replay buffer, statistics, ranking. The
same structs are the store's rows, `kb export`'s JSON and what agents and the server get, so a
field added here reaches all of them. Nothing here holds a secret: there is deliberately no field
for endpoints, API keys or user paths."""

from __future__ import annotations

import hashlib
from typing import Literal, Protocol, TypeGuard, get_args

import msgspec

Outcome = Literal[
    "success",  # verified and faster than the kernel it started from
    "regression",  # verified but not faster
    "compile_error",
    "wrong_result",
    "rejected",  # failed the static or soft (LLM) checks, e.g. a reward hack
    "crash",
    "timeout",
    "error",  # anything else that stopped the attempt, e.g. no usable reply from the model
    # The harness or the LLM endpoint failed through no fault of the candidate or the technique
    # (no GPU, ncu counter permission, a worker that died on its own, the endpoint down). Kept
    # for its tokens and history; the statistics and so the ranking ignore it.
    "infrastructure",
]
OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))


def is_outcome(value: str) -> TypeGuard[Outcome]:
    """Whether `value` is one of the Outcome literals (an OptimizeStep's str is)."""
    return value in OUTCOMES


NO_TARGET = ""  # an attempt's target_finding when the technique addressed none of the findings
# The target finding the KB files attempts under that did not record theirs (None); not a
# finding id, so no attempt may claim it.
UNRECORDED_TARGET = "(not recorded)"
VERIFIED_OUTCOMES: frozenset[str] = frozenset({"success", "regression"})
FAILED_OUTCOMES: frozenset[str] = frozenset(
    {"compile_error", "wrong_result", "rejected", "crash", "timeout", "error"}
)

Category = Literal[
    "memory", "compute", "parallelism", "reduction", "structure", "launch", "learned"
]
Bottleneck = Literal["memory", "compute", "latency", "occupancy", "launch", "unknown"]
# where a prediction's evidence comes from (kb.ranking.evidence_tiers): "this_kernel": its own
# attempts on this very kernel; "other_states": this technique aimed at the same finding on
# kernels of other states
Basis = Literal["prior", "ncu_estimate", "this_kernel", "this_arch", "other_archs", "other_states"]


class FindingLike(Protocol):
    """What ranking reads from a profiling finding (harness.records.Finding satisfies it)."""

    @property
    def id(self) -> str: ...

    @property
    def estimated_speedup(self) -> float | None: ...  # percent of runtime ncu says is saved


class Technique(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str  # e.g. "coalesce_global_access"
    category: Category
    title: str
    description: str
    how_to_apply: str
    requires: list[str] = []  # preconditions, e.g. "sm_80+", "fp16 inputs allowed"
    addresses_states: list[str] = []  # full state ids ("memory.dram") or bottlenecks ("memory")
    addresses_findings: list[str] = []  # finding ids, e.g. "uncoalesced_global_access"
    prior_speedup: float = 1.0  # expected speedup factor when the rewrite verifies
    prior_source: str = ""  # where the prior comes from, e.g. "rule of thumb: ..."


# A proposed technique's standing (kb.proposal_status decides it from the decision and outcomes).
ProposalStatus = Literal["proposed", "promoted", "retired"]
ProposalDecision = Literal["promoted", "retired"]  # what a user may decide with `kb proposals`


class Proposal(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A technique the optimizing agent proposed for a state where the KB had none left that
    fit, with where it came from. It lives in the user's (or team's) KB, travels with its
    export, and is never written into the shipped catalog. Until a user decides, its status
    follows its measured outcomes (kb.proposal_status)."""

    technique: Technique
    arch: str  # where it was proposed
    state: str
    kernel: str
    model: str  # the LLM that proposed it
    time: float  # epoch seconds
    decision: ProposalDecision | None = None  # a user's promote or retire; None: outcomes decide
    decision_time: float | None = None  # of two copies' decisions (a merge), the newer wins
    decision_reason: str = ""

    @property
    def id(self) -> str:  # the outbox keys changes by id
        return self.technique.id


class State(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str  # e.g. "memory.dram"
    bottleneck: Bottleneck
    description: str = ""
    arch: str | None = None  # None: meaningful on every architecture


def code_hash(text: str) -> str:
    """The hash `Attempt.source_hash` and `candidate_hash` hold of a kernel's source text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Attempt(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One optimization attempt: the replay buffer's row and the unit of learning."""

    id: str  # uuid4 hex; the key merges deduplicate on
    time: float  # epoch seconds
    arch: str  # e.g. "sm_90"
    kernel: str
    source_hash: str  # hash of the source the attempt started from
    candidate_hash: str  # hash of the candidate source ("" when none was produced)
    before_state: str
    after_state: str | None = None  # state of the candidate after re-profiling, when verified
    technique: str
    predicted_speedup: float  # what the ranking predicted when the technique was chosen
    measured_speedup: float | None = None  # candidate vs starting kernel, when verified and timed
    outcome: Outcome
    correctness_detail: str = ""  # e.g. "max abs err 3e-6 over 3 seeds"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error_kind: str | None = None  # e.g. "nvcc", "llm_timeout", "static_check:library_call"
    # The finding the technique was aimed at (kb.ranking's `target_finding`; NO_TARGET: none; None:
    # not recorded). Gains are learned per target finding, so a defect's fix isn't expected
    # elsewhere.
    target_finding: str | None = None


def target_of(attempt: Attempt) -> str:
    """The target finding the KB files `attempt` under: its own, or UNRECORDED_TARGET."""
    return UNRECORDED_TARGET if attempt.target_finding is None else attempt.target_finding


MAX_NOTE_CHARS = 600  # one note; longer ones are cut with an ellipsis


def clip_note(text: str) -> str:
    """A note as the KB keeps it: stripped, and at most MAX_NOTE_CHARS long (prompts quote
    notes, so one runaway note must not crowd out the rest)."""
    text = text.strip()
    if len(text) > MAX_NOTE_CHARS:
        text = text[: MAX_NOTE_CHARS - 1].rstrip() + "…"
    return text


class Note(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A natural-language note on an entry (the textual gradient); every note is kept in
    history, the most recent few are what prompts see."""

    id: str
    arch: str
    state: str
    technique: str
    time: float
    text: str


class EntryStats(msgspec.Struct, kw_only=True):
    """Statistics of one (arch, state, technique) entry, recomputable from its attempts."""

    arch: str
    state: str
    technique: str
    attempts: int
    successes: int
    regressions: int
    failures: int
    mean_log_speedup: float | None  # over verified attempts with a measured speedup
    var_log_speedup: float | None  # sample variance; None below two measurements
    predicted_speedup: float  # expected speedup of trying it again (failures included)
    confidence: float  # 0..1, grows with attempts
    notes: list[str]  # the bounded recent notes, oldest first
    updated: float
    prior_speedup: float | None = None  # set by the policy update; overrides the catalog prior
    prior_source: str | None = None


class PriorOverride(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A prior set by the policy update for one entry (exported: not derivable from attempts)."""

    arch: str
    state: str
    technique: str
    prior_speedup: float
    prior_source: str
    time: float


# What a KB learns, one record at a time: what its writes take and what a team KB's outbox holds
# while the server is unreachable.
Change = Attempt | Note | PriorOverride | State | Proposal


class RankedTechnique(msgspec.Struct, kw_only=True):
    technique: str  # id
    title: str
    category: str
    predicted_speedup: float  # expected value: P(verified) * gain + (1 - P(verified)) * 1
    confidence: float  # 0..1
    attempts: int
    successes: int
    regressions: int
    failures: int
    mean_speedup: float | None  # geometric mean of measured speedups behind the prediction
    basis: Basis  # what dominates the prediction
    notes: list[str]  # the entry's bounded recent notes (textual gradient), oldest first
    gain_if_verified: float = 1.0  # predicted speedup given the candidate verifies
    success_probability: float = 1.0  # predicted chance the candidate compiles and verifies
    explanation: str = ""  # where the number comes from, for hover and prompts
    # The kernel's finding this technique is aimed at (NO_TARGET: none of them): the learned
    # outcomes behind the prediction are those of attempts aimed at the same finding.
    target_finding: str = NO_TARGET
    # What those learned outcomes are, e.g. "3 attempts on sm_90 on kernels with
    # uncoalesced_global_access", or "no attempts yet"; with how many attempts on kernels with
    # other findings were left out.
    evidence: str = ""
    # Set for a technique an agent proposed (kb.records.Proposal): "proposed" while it is on
    # trial (ranked with a conservative prior), "promoted" once its outcomes (or a user) made it
    # a regular; None for a catalog technique.
    proposal: ProposalStatus | None = None
    # How uncertain the gain is: the posterior standard deviation of log(gain_if_verified),
    # the prior's doubt narrowed by the outcomes behind it (kb.ranking.predict); what the
    # selection's expected improvement integrates over (kb.ranking.expected_improvement).
    log_gain_sd: float = 0.0
    # Attempts of this technique on the very kernel ranked (KnowledgeBase.rank's source_hash;
    # 0 when ranked for a state): their sum is how often the loop has been at that kernel.
    kernel_attempts: int = 0


class KBSummary(msgspec.Struct, kw_only=True):
    path: str
    schema_version: int
    attempts: int
    outcomes: dict[str, int]
    architectures: dict[str, int]  # attempts per arch
    entries_with_attempts: int
    notes: int
    techniques: int
    states: int
    prompt_tokens: int
    completion_tokens: int


class KBExport(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`kb export` / `kb import` / `kb merge` JSON. Statistics are not stored: they are
    recomputed from `attempts` on import, so a merge can never double count."""

    format: Literal["kernelblaster-kb"] = "kernelblaster-kb"
    version: int = 1
    exported: float
    techniques: list[Technique] = []
    states: list[State] = []
    priors: list[PriorOverride] = []
    notes: list[Note] = []
    attempts: list[Attempt] = []
    proposals: list[Proposal] = []  # their techniques are in `techniques` too
