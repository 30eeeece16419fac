"""Predicted gain of a technique from its prior and its record, and the loop's selection
(docs/knowledge-base.md). Per (arch, state, technique, target finding): a log-normal gain if
verified, the prior shrunk toward the measured mean (`prior_worth`), weighed by a Beta chance of
verifying, so failures lower a prediction as surely as regressions. Only attempts aimed at the
same finding count: one state holds kernels with different fixes. `select` takes the best first
and, on a revisited kernel, the best `expected_improvement` over the run's fastest kernel."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from kernelblaster.kb.catalog import finding_kinds
from kernelblaster.kb.proposal_status import PROPOSAL_PRIOR_CAP
from kernelblaster.kb.records import (
    NO_TARGET,
    UNRECORDED_TARGET,
    Basis,
    EntryStats,
    FindingLike,
    ProposalStatus,
    RankedTechnique,
    Technique,
)
from kernelblaster.kb.rows import CountsByTarget, EntryRow
from kernelblaster.kb.stats import EntryCounts

# The prior is worth PRIOR_STRENGTH outcomes of a key whose log speedups spread by OUTCOME_SPREAD.
# On the H200 learning table the priors were off ~4x (rms log error 1.39) while one kind of kernel's
# rewrites agree within ~30%: one outcome says more. Tuned on training tasks.
PRIOR_STRENGTH = 0.1
OUTCOME_SPREAD = 0.3
# Beta(1.5, 0.5): mean 0.75, worth two attempts. Rule of thumb for LLM rewrites with compile
# and verification retries; the KB's own counts take over quickly.
VERIFY_PRIOR = (1.5, 0.5)
OTHER_ARCH_WEIGHT = 0.5
# Attempts of the same technique aimed at the same finding on kernels of other states: the
# finding names the defect the fix addresses, so they speak for this kernel too, less surely.
OTHER_STATE_WEIGHT = 0.5
NCU_GAIN_CAP = 4.0  # ncu estimates above 75% of runtime saved are capped at 4x
CONFIDENCE_SCALE = 5.0  # attempts at which half the prior's doubt is gone
PRIOR_CONFIDENCE = {"prior": 0.1, "ncu_estimate": 0.25}


class Prediction(msgspec.Struct, kw_only=True):
    predicted_speedup: float
    gain_if_verified: float
    success_probability: float
    confidence: float
    log_gain_sd: float  # posterior standard deviation of log(gain_if_verified)


def ncu_gain(estimated_speedup_percent: float | None) -> float | None:
    """ncu's estimated speedup is the percent of runtime a fix would save: gain 1/(1 - p)."""
    if estimated_speedup_percent is None or not estimated_speedup_percent > 0:
        return None
    saved = min(estimated_speedup_percent / 100.0, 1.0 - 1.0 / NCU_GAIN_CAP)
    return 1.0 / (1.0 - saved)


def predict(
    prior_gain: float,
    counts: EntryCounts | None,
    *,
    weight: float = 1.0,
    prior_confidence: float = PRIOR_CONFIDENCE["prior"],
) -> Prediction:
    """Combine a prior gain with the counts of one entry (or pooled entries) weighted `weight`."""
    counts = counts or EntryCounts()
    n_log = weight * counts.n_measured
    variance = outcome_variance(counts, weight)
    worth = prior_worth(counts, weight)
    mean_log = (worth * math.log(prior_gain) + n_log * counts.mean_log_speedup) / (worth + n_log)
    alpha, beta = VERIFY_PRIOR
    p_verified = (alpha + weight * counts.verified) / (
        alpha + beta + weight * (counts.verified + counts.failures)
    )
    gain = math.exp(mean_log)
    effective = weight * counts.attempts
    doubt = (1.0 - prior_confidence) * CONFIDENCE_SCALE / (CONFIDENCE_SCALE + effective)
    return Prediction(
        predicted_speedup=p_verified * gain + (1.0 - p_verified),
        gain_if_verified=gain,
        success_probability=p_verified,
        confidence=1.0 - doubt,
        log_gain_sd=math.sqrt(variance / (worth + n_log)),
    )


def outcome_variance(counts: EntryCounts, weight: float = 1.0) -> float:
    """The variance of one outcome's log speedup on the key `counts` holds (each outcome
    weighted `weight`): the sample variance shrunk toward OUTCOME_SPREAD squared by one
    pseudo-outcome (so a single outcome, which has no spread of its own, gets the typical one)."""
    n = weight * counts.n_measured
    return (weight * counts.m2_log_speedup + OUTCOME_SPREAD**2) / (max(n - 1.0, 0.0) + 1.0)


def prior_worth(counts: EntryCounts, weight: float = 1.0) -> float:
    """How many measured outcomes the prior's log gain is worth against `counts`: the normal-normal
    weight PRIOR_STRENGTH, scaled by the key's `outcome_variance` over OUTCOME_SPREAD^2. Outcomes
    that agree outweigh the prior; a key whose outcomes scatter keeps its pull."""
    return PRIOR_STRENGTH * outcome_variance(counts, weight) / OUTCOME_SPREAD**2


def expected_improvement(item: RankedTechnique, behind: float, exploration: float) -> float:
    """The log of how far `item`'s candidate is expected to beat the run's fastest kernel, `behind`
    (log) ahead of this one: P(verified) x E[max(0, L - behind)], L ~ N(log gain, (exploration x
    log_gain_sd)^2), Bayesian optimisation's expected improvement. A confident prediction short
    of what the run found scores little; an uncertain one keeps its chance."""
    sd = exploration * item.log_gain_sd
    d = (math.log(item.gain_if_verified) - behind) / sd
    if d > -30.0:  # erfc keeps the normal tail exact; the sum loses ~2 log10|d| digits
        density = math.exp(-d * d / 2) / math.sqrt(2 * math.pi)
        log_tail = math.log(sd * (density + d * 0.5 * math.erfc(-d / math.sqrt(2))))
    else:  # the density underflows: the Mills-ratio series, in logs
        log_tail = (
            math.log(sd) - d * d / 2 - 0.5 * math.log(2 * math.pi) - 2 * math.log(-d)
            + math.log1p(-3 / d**2 + 15 / d**4)
        )  # fmt: skip
    return math.log(item.success_probability) + log_tail


def select(
    ranked: list[RankedTechnique],
    k: int,
    *,
    top_k: int | None = None,
    temperature: float = 1.0,
    exploration: float = 0.0,
    visits: int = 0,
    behind: float = 0.0,
    seed: int | None = None,
) -> list[RankedTechnique]:
    """Weighted random k of the `top_k` best of `ranked` (all when None), without replacement. On a
    kernel's first visit, or at exploration 0, each scores log(predicted_speedup); on a revisited
    one, its `expected_improvement` over the run's fastest kernel. Weights are exp(score /
    temperature); temperature <= 0 is greedy. The same seed and input give the same selection."""
    if k <= 0 or not ranked:
        return []
    revisit = exploration > 0 and visits > 0
    scored = [
        (
            expected_improvement(item, behind, exploration)
            if revisit
            else math.log(item.predicted_speedup),
            item,
        )
        for item in ranked
    ]
    scored.sort(key=lambda pair: -pair[0])  # stable: ties keep the ranking's order
    shortlist = scored[: max(top_k, 1)] if top_k is not None else scored
    if temperature <= 0:
        return [item for _, item in shortlist[:k]]
    rng = random.Random(seed)
    keyed = []
    for score, item in shortlist:
        # Gumbel-top-k: the k largest of log-weight + Gumbel noise are distributed exactly as
        # k draws without replacement, each in proportion to its weight.
        uniform = rng.random() or 5e-324  # random() is in [0, 1); keep log() finite
        gumbel = -math.log(-math.log(uniform))
        keyed.append((score / temperature + gumbel, item))
    keyed.sort(key=lambda pair: -pair[0])
    return [item for _, item in keyed[:k]]


# --- assembling predictions for entries and rankings -----------------------------------------

# How far a technique's prior is raised toward ncu's estimate for a finding: even a defect's fix
# realizes only part of the best case, and a stall or symptom has many causes.
KIND_WEIGHT = {"cause": 0.8, "stall": 0.4, "symptom": 0.2}
SECONDARY_WEIGHT = 0.5  # for a finding a technique lists after its primary (first) one


class Prior(msgspec.Struct, kw_only=True):
    """The gain expected of a technique before any measurement, and where it comes from."""

    gain: float
    basis: Basis  # "prior" or "ncu_estimate"
    explanation: str
    learned: bool = False  # set for this entry by the policy update


def addresses(technique: Technique, state: str, finding_ids: set[str]) -> bool:
    """Whether `technique` targets `state` (full id or its bottleneck) or one of the findings."""
    bottleneck = state.split(".")[0]
    for target in technique.addresses_states:
        if target in (state, bottleneck) or ("." not in state and target.split(".")[0] == state):
            return True
    return bool(finding_ids & set(technique.addresses_findings))


def same_bottleneck(technique: Technique, state: str) -> bool:
    bottleneck = state.split(".")[0]
    return any(target.split(".")[0] == bottleneck for target in technique.addresses_states)


def directness(technique: Technique, finding: str) -> float:
    """0 when `technique` does not address `finding`; else its weight (see KIND_WEIGHT)."""
    if finding not in technique.addresses_findings:
        return 0.0
    weight = KIND_WEIGHT[finding_kinds().get(finding, "symptom")]
    return weight if technique.addresses_findings[0] == finding else weight * SECONDARY_WEIGHT


def finding_gains(findings: Sequence[FindingLike]) -> dict[str, float | None]:
    """Each finding's id and the gain ncu estimates for fixing it (None: no estimate)."""
    return {f.id: ncu_gain(f.estimated_speedup) for f in findings}


def target_finding(technique: Technique, gains: dict[str, float | None]) -> str:
    """The finding `technique` is aimed at on a kernel with these findings (`finding_gains`): of
    those ncu estimates a saving for, the one it addresses most directly (catalog order breaks
    ties); NO_TARGET when none. A finding without an estimate doesn't count: ncu's rule did not
    fire."""
    aimed = [f for f in technique.addresses_findings if gains.get(f) is not None]
    return max(aimed, key=lambda finding: directness(technique, finding), default=NO_TARGET)


class Learned:
    """What a state's techniques realized, per (technique, target finding): on the ranking's
    arch (`here`), summed over every other architecture (`elsewhere`), and on this arch summed
    over every other state (`other_states`: what transfers between kernels whose states
    differ but whose finding, and so fix, is the same)."""

    def __init__(
        self,
        here: CountsByTarget,
        elsewhere: CountsByTarget,
        *,
        other_states: CountsByTarget | None = None,
        this_kernel: CountsByTarget | None = None,
    ):
        self.here, self.elsewhere = here, elsewhere
        self.other_states = other_states or {}
        # the attempts on the very kernel being ranked: two rewrites by one technique from
        # different kernels of one state (tiling a naive GEMM, tiling a fused one) can end
        # differently, and what happened on this one says most about it
        self.this_kernel = this_kernel or {}
        self._attempts: dict[str, dict[str, int]] = {}  # technique -> target -> attempts
        for by_target in (here, elsewhere):
            for (technique, target), counts in by_target.items():
                per_target = self._attempts.setdefault(technique, {})
                per_target[target] = per_target.get(target, 0) + counts.attempts

    def aimed_elsewhere(self, technique: str, target: str) -> int:
        """Attempts of `technique` aimed at other findings than `target` (on any arch; those
        that did not record their target aside)."""
        per_target = self._attempts.get(technique, {})
        return sum(n for key, n in per_target.items() if key not in (target, UNRECORDED_TARGET))


class Evidence(NamedTuple):
    """The learned outcomes a prediction rests on, how much each counts, and in words."""

    counts: EntryCounts
    weight: float
    basis: Basis | None  # None: nothing learned applies
    text: str


def evidence_tiers(
    target: str, arch: str, learned: Learned
) -> list[tuple[CountsByTarget, str, float, Basis, str]]:
    """Where a prediction looks for evidence, most specific first (the first with attempts wins):
    this kernel; the exact key on this arch, then on others; this finding on other states of this
    arch (OTHER_STATE_WEIGHT); then attempts from before schema 4 that recorded no target."""
    elsewhere = f"on other architectures (weighted {OTHER_ARCH_WEIGHT})"
    pooled = f"on {arch}, kernels of other states (weighted {OTHER_STATE_WEIGHT})"
    return [
        (learned.this_kernel, target, 1.0, "this_kernel", "on this very kernel"),
        (learned.here, target, 1.0, "this_arch", f"on {arch}"),
        (learned.elsewhere, target, OTHER_ARCH_WEIGHT, "other_archs", elsewhere),
        (learned.other_states, target, OTHER_STATE_WEIGHT, "other_states", pooled),
        (learned.here, UNRECORDED_TARGET, 1.0, "this_arch", f"on {arch}"),
        (learned.elsewhere, UNRECORDED_TARGET, OTHER_ARCH_WEIGHT, "other_archs", elsewhere),
    ]


def learned_evidence(technique: str, target: str, arch: str, learned: Learned) -> Evidence:
    """The attempts a prediction for `technique` aimed at `target` learns from: the first tier
    of `evidence_tiers` with any. Attempts aimed at other findings never count, and the text
    says how many were left out."""
    left_out = learned.aimed_elsewhere(technique, target)
    not_counted = f"; {left_out} on kernels with other findings not counted" if left_out else ""
    tiers = evidence_tiers(target, arch, learned)
    for by_target, key, weight, basis, where in tiers:
        counts = by_target.get((technique, key))
        if counts is not None and counts.attempts:
            plural = "s" if counts.attempts != 1 else ""
            kernels = kernels_described(key)
            text = f"{counts.attempts} attempt{plural} {where} on {kernels}{not_counted}"
            return Evidence(counts, weight, basis, text)
    text = (
        f"no attempts yet on {kernels_described(target)}{not_counted}"
        if left_out
        else "no attempts yet"
    )
    return Evidence(EntryCounts(), 1.0, None, text)


def kernels_described(target: str) -> str:
    """The kernels a target finding stands for, in words."""
    if target == NO_TARGET:
        return "kernels with no finding it addresses"
    if target == UNRECORDED_TARGET:
        return "kernels whose findings were not recorded"
    return f"kernels with {target}"


def prior(technique: Technique, here: EntryRow | None, ncu_gains: dict[str, float | None]) -> Prior:
    """A prior set by the policy update for this entry wins. Otherwise the catalog's rule of
    thumb, raised toward ncu's estimate for each finding the technique addresses, as far as it
    addresses it directly (the largest raise counts)."""
    if here is not None and here.prior_speedup is not None:
        gain = here.prior_speedup
        return Prior(
            gain=gain,
            basis="prior",
            explanation=f"prior {gain:.2f}x set by policy update: {here.prior_source}",
            learned=True,
        )
    base = technique.prior_speedup
    best = Prior(
        gain=base, basis="prior", explanation=f"prior {base:.2f}x ({technique.prior_source})"
    )
    for finding, estimate in sorted(ncu_gains.items()):
        weight = directness(technique, finding)
        if estimate is None or weight == 0.0 or estimate <= base:
            continue  # an estimate only raises the techniques that address its finding
        gain = math.exp(math.log(base) + weight * (math.log(estimate) - math.log(base)))
        if gain > best.gain:
            saved = 100.0 * (1.0 - 1.0 / estimate)
            best = Prior(
                gain=gain,
                basis="ncu_estimate",
                explanation=f"ncu: fixing {finding} saves up to ~{saved:.0f}% ({estimate:.2f}x); "
                f"prior {base:.2f}x raised to {gain:.2f}x (directness {weight:.2f})",
            )
    return best


def proposal_prior(start: Prior, catalog_floor: float | None) -> Prior:
    """The prior of a proposal on trial: its own (the LLM's guess, or one the policy update
    set), capped at PROPOSAL_PRIOR_CAP and at the least prior of the other techniques ranked with
    it, so an untried proposal never outranks an untried catalog technique, and one that fails
    drops below them (kb.proposal_status says when it is promoted or retired)."""
    cap = min(PROPOSAL_PRIOR_CAP, catalog_floor or PROPOSAL_PRIOR_CAP)
    if start.gain <= cap:
        return Prior(
            gain=start.gain, basis=start.basis, explanation=f"proposed; {start.explanation}"
        )
    return Prior(
        gain=cap,
        basis="prior",
        explanation=f"proposed, on trial: {start.explanation}; capped at {cap:.2f}x until "
        "measured outcomes promote it",
    )


def rank_all(
    techniques: dict[str, Technique],
    arch: str,
    state: str,
    findings: Sequence[FindingLike],
    here: dict[str, EntryRow],
    learned: Learned,
    notes: dict[str, list[str]],
    proposals: dict[str, ProposalStatus] | None = None,
) -> list[RankedTechnique]:
    """The ranking of `state`'s techniques on `arch`, best predicted speedup first, from the
    KB's rows: this arch's entries (`here`, for the priors the policy update set), what was
    learned per target finding, and recent notes. `proposals` holds the status of each proposed
    technique: a retired one is not ranked, one on trial gets `proposal_prior`."""
    proposals = proposals or {}
    retired = {tid for tid, status in proposals.items() if status == "retired"}
    techniques = {tid: t for tid, t in techniques.items() if tid not in retired}
    ncu_gains = finding_gains(findings)
    # Techniques aimed at this state (or its findings); for a state nothing aims at yet, those
    # aimed at any state of its bottleneck; failing that, everything. Plus any technique
    # with an entry for this state here or a record of it on another arch.
    candidates = {tid for tid, t in techniques.items() if addresses(t, state, set(ncu_gains))} or {
        tid for tid, t in techniques.items() if same_bottleneck(t, state)
    }
    candidates = candidates or set(techniques)
    # an entry exists once tried, noted or re-primed
    candidates |= set(here) | {tid for tid, _ in learned.elsewhere}
    candidates -= retired
    known = {tid: techniques[tid] for tid in candidates}  # recording creates the technique row
    priors = {tid: prior(known[tid], here.get(tid), ncu_gains) for tid in candidates}
    aimed = {tid for tid in candidates if set(ncu_gains) & set(known[tid].addresses_findings)}
    on_trial = {tid for tid in candidates if proposals.get(tid) == "proposed"}
    # Before it is tried, a technique aimed at none of what ncu found can't be expected to do
    # better than the least promising one aimed at some of it.
    floor = min(
        (priors[tid].gain for tid in aimed - on_trial if not priors[tid].learned), default=None
    )
    for tid in candidates - aimed:
        if floor is not None and not priors[tid].learned and priors[tid].gain > floor:
            priors[tid] = Prior(
                gain=floor,
                basis="prior",
                explanation=f"{priors[tid].explanation}; capped at {floor:.2f}x: it addresses "
                "none of the kernel's findings",
            )
    catalog_floor = min((priors[tid].gain for tid in candidates - on_trial), default=None)
    for tid in on_trial:
        priors[tid] = proposal_prior(priors[tid], catalog_floor)
    ranked = [
        rank_technique(
            known[tid],
            arch,
            priors[tid],
            target_finding(known[tid], ncu_gains),
            learned,
            notes.get(tid, []),
            proposal=proposals.get(tid),
        )
        for tid in candidates
    ]
    # ties: a catalog technique before a proposal on trial, an aimed one before the others
    ranked.sort(
        key=lambda r: (
            -r.predicted_speedup,
            r.technique in on_trial,
            r.technique not in aimed,
            -r.confidence,
            r.technique,
        )
    )
    return ranked


def rank_technique(
    technique: Technique,
    arch: str,
    start: Prior,
    target: str,
    learned: Learned,
    notes: list[str],
    *,
    proposal: ProposalStatus | None = None,
) -> RankedTechnique:
    """`technique`'s prediction from its prior and what it realized aimed at `target`."""
    evidence = learned_evidence(technique.id, target, arch, learned)
    counts = evidence.counts
    p = predict(
        start.gain, counts, weight=evidence.weight, prior_confidence=PRIOR_CONFIDENCE[start.basis]
    )
    return RankedTechnique(
        technique=technique.id,
        title=technique.title,
        category=technique.category,
        predicted_speedup=p.predicted_speedup,
        confidence=p.confidence,
        attempts=counts.attempts,
        successes=counts.successes,
        regressions=counts.regressions,
        failures=counts.failures,
        mean_speedup=math.exp(counts.mean_log_speedup) if counts.n_measured else None,
        basis=evidence.basis or start.basis,
        notes=notes,
        gain_if_verified=p.gain_if_verified,
        success_probability=p.success_probability,
        explanation=f"{start.explanation}; {evidence.text}",
        target_finding=target,
        evidence=evidence.text,
        proposal=proposal,
        log_gain_sd=p.log_gain_sd,
        kernel_attempts=sum(
            c.attempts for (tid, _), c in learned.this_kernel.items() if tid == technique.id
        ),
    )


def entry_stats(row: EntryRow, technique: Technique | None, notes: list[str]) -> EntryStats:
    """An entry's statistics with its own prediction (this arch only, no findings)."""
    counts = row.counts
    prior_gain = row.prior_speedup or (technique.prior_speedup if technique else 1.0)
    p = predict(prior_gain, counts)
    return EntryStats(
        arch=row.arch,
        state=row.state,
        technique=row.technique,
        attempts=counts.attempts,
        successes=counts.successes,
        regressions=counts.regressions,
        failures=counts.failures,
        mean_log_speedup=counts.mean_log_speedup if counts.n_measured else None,
        var_log_speedup=counts.var_log_speedup,
        predicted_speedup=p.predicted_speedup,
        confidence=p.confidence,
        notes=notes,
        updated=row.updated,
        prior_speedup=row.prior_speedup,
        prior_source=row.prior_source,
    )
