"""What a step tries: a weighted random top-k pick from the KB's ranking for the kernel's
current state (kb.ranking.select), without techniques that already failed on this very kernel
or that rollouts running alongside are trying on it; first, where the KB has none left for the
state, new techniques the LLM proposes (agents/policy/proposals.py). Also the KB's name for a
state the classifier found (the state extractor, for states the catalog lacks)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from kernelblaster.agents.llm.client import LlmClient, LlmError
from kernelblaster.agents.llm.state_extractor import refine_state
from kernelblaster.agents.loop.plan import (
    RolloutPlan,
    RolloutResult,
    RolloutServices,
    VerifiedKernel,
)
from kernelblaster.agents.policy.proposals import propose_where_needed
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeResult,
)
from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.kb.ranking import finding_gains, select, target_finding
from kernelblaster.kb.records import (
    NO_TARGET,
    RankedTechnique,
    Technique,
    code_hash,
)
from kernelblaster.kb.store import KnowledgeBase


def known_state(
    client: LlmClient, kb: KnowledgeBase, state: PerfState, spent: OptimizeResult | RolloutResult
) -> PerfState:
    """`state` under the KB's name for it. The classifier's ids are the KB's own except for
    rarer states the catalog lacks; for those the state extractor (an LLM) picks the closest
    known state or proposes a new one, taken only above its confidence threshold."""
    known = sorted(known_state.id for known_state in kb.states())
    if state.state in known:
        return state
    try:
        choice = refine_state(client, state, known)
    except LlmError:
        return state  # ranking copes with an unknown state: it offers every technique
    spent.prompt_tokens += choice.usage.prompt_tokens
    spent.completion_tokens += choice.usage.completion_tokens
    if choice.source == "new":
        kb.ensure_state(choice.state, choice.rationale)
    return msgspec.structs.replace(state, state=choice.state)


def proposed_techniques(
    plan: RolloutPlan,
    services: RolloutServices,
    current: VerifiedKernel,
    result: RolloutResult,
    asked: set[tuple[str, str]],
) -> list[str]:
    """The ids of new techniques proposed for `current`'s state when the KB has none left for
    it (agents/policy/proposals.py), asked once per state and source in a rollout; [] otherwise."""
    key = (current.state.state, code_hash(current.source))
    if plan.request.proposals <= 0 or key in asked:
        return []
    with services.proposing:
        batch = propose_where_needed(
            services.client,
            services.kb,
            current.state,
            kernel=plan.request.kernel,
            source=current.source,
            limit=plan.request.proposals,
        )
    if batch is None:
        return []
    asked.add(key)
    result.prompt_tokens += batch.usage.prompt_tokens
    result.completion_tokens += batch.usage.completion_tokens
    result.proposals += batch.verdicts
    return batch.accepted


def choose(
    kb: KnowledgeBase,
    state: PerfState,
    *,
    source_hash: str | None,
    k: int,
    forced: str | None,
    seed: int | None,
    temperature: float,
    exploration: float,
    offered: Collection[str] | None = None,
    kernel_hash: str | None = None,
    among: Sequence[str] = (),
    busy: Collection[str] = (),
    exhausted: Collection[str] = (),
    behind: float = 0.0,
) -> RankedTechnique | None:
    """What the step tries: `forced`, else a weighted random top-k pick among `among` (just
    proposed) when any of them is ranked, else among the ranking; only techniques in `offered`
    (None: every one), ranked with this kernel's (`kernel_hash`) own attempts first; `behind`:
    how far (log) this kernel is behind the fastest the run found (kb.ranking.select)."""
    ranked = kb.rank(state.arch, state.state, state.findings, source_hash=kernel_hash)
    visits = sum(r.kernel_attempts for r in ranked)  # on this kernel, failures included
    if offered is not None:
        ranked = [r for r in ranked if r.technique in offered]
    if forced is not None:
        match = next((r for r in ranked if r.technique == forced), None)
        if match is not None:
            return match
        # The user asked for it although the KB doesn't rank it for this state: honour that,
        # predicting the catalog prior.
        technique = kb.technique(forced)
        if technique is not None:
            return RankedTechnique(
                technique=technique.id,
                title=technique.title,
                category=technique.category,
                predicted_speedup=technique.prior_speedup,
                confidence=0.0,
                attempts=0,
                successes=0,
                regressions=0,
                failures=0,
                mean_speedup=None,
                basis="prior",
                notes=[],
                explanation=technique.prior_source,
                target_finding=target_on(kb, forced, state),
            )
    ranked = [r for r in ranked if r.technique in among] or ranked
    if source_hash is not None:
        ranked = _untried_or_successful(kb, state, source_hash, ranked, exhausted)
    # What rollouts running alongside are trying on this kernel right now (agents/loop/in_flight.py)
    ranked = [r for r in ranked if r.technique not in busy] or ranked
    picked = select(
        ranked,
        1,
        top_k=max(k, 1),
        temperature=temperature,
        exploration=exploration,
        visits=visits,
        behind=behind,
        seed=seed,
    )
    return picked[0] if picked else None


def _untried_or_successful(
    kb: KnowledgeBase,
    state: PerfState,
    source_hash: str,
    ranked: list[RankedTechnique],
    exhausted: Collection[str] = (),
) -> list[RankedTechnique]:
    """`ranked` without the techniques already tried without success on this very kernel
    (`source_hash`): its own record says they fail. Successes stay, unless each led to an
    `exhausted` kernel. When nothing is left, the kernel is a dead end and the rollout goes back
    along its branch."""
    tried = kb.attempts(arch=state.arch, state=state.state, source_hash=source_hash)
    succeeded = {
        a.technique for a in tried if a.outcome == "success" and a.candidate_hash not in exhausted
    }
    failed = {a.technique for a in tried if a.outcome != "infrastructure"} - succeeded
    return [r for r in ranked if r.technique not in failed]


def target_on(kb: KnowledgeBase, technique: str, state: PerfState) -> str:
    """The finding of `state` that `technique` is aimed at (kb.ranking.target_finding); none
    for a technique the KB has no catalog entry for."""
    known = kb.technique(technique)
    return target_finding(known, finding_gains(state.findings)) if known else NO_TARGET


def catalog_entry(kb: KnowledgeBase, choice: RankedTechnique) -> Technique:
    """The catalog entry of a ranked technique; a learned one (not in the catalog) is described
    by its title, which is all the KB knows of it."""
    return kb.technique(choice.technique) or Technique(
        id=choice.technique,
        category="learned",
        title=choice.title,
        description=choice.title,
        how_to_apply=choice.explanation or choice.title,
    )
