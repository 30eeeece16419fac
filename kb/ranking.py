"""Predicted gain of a technique from its prior and its track record, and the weighted random
top-k selection the optimization loop explores with.

The model, per (arch, state, technique):
- gain if the candidate verifies: a log-normal mean, the prior's log gain worth PRIOR_STRENGTH
  observations, shrunk toward the mean measured log speedup as measurements accumulate;
- chance the candidate compiles and verifies: a Beta(VERIFY_PRIOR) updated by verified vs
  failed attempts;
- predicted speedup = P(verified) x gain + (1 - P(verified)) x 1 (a failed attempt leaves the
  kernel as it was), so failures lower the expected value as surely as regressions do.
Attempts on other architectures count OTHER_ARCH_WEIGHT each when this arch has none.
"""

from __future__ import annotations

import math
import random

import msgspec

from kernelblaster.kb.records import Basis, EntryStats, RankedTechnique, Technique
from kernelblaster.kb.rows import EntryRow
from kernelblaster.kb.stats import EntryCounts

PRIOR_STRENGTH = 3.0
# Beta(1.5, 0.5): mean 0.75, worth two attempts. Rule of thumb for LLM rewrites with compile
# and verification retries; the KB's own counts take over quickly.
VERIFY_PRIOR = (1.5, 0.5)
OTHER_ARCH_WEIGHT = 0.5
NCU_GAIN_CAP = 4.0  # ncu estimates above 75% of runtime saved are capped at 4x
CONFIDENCE_SCALE = 5.0  # attempts at which half the prior's doubt is gone
PRIOR_CONFIDENCE = {"prior": 0.1, "ncu_estimate": 0.25}


class Prediction(msgspec.Struct, kw_only=True):
    predicted_speedup: float
    gain_if_verified: float
    success_probability: float
    confidence: float


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
    mean_log = (PRIOR_STRENGTH * math.log(prior_gain) + n_log * counts.mean_log_speedup) / (
        PRIOR_STRENGTH + n_log
    )
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
    )


def select(
    ranked: list[RankedTechnique],
    k: int,
    *,
    temperature: float = 1.0,
    seed: int | None = None,
) -> list[RankedTechnique]:
    """Weighted random top-k without replacement. Weights are predicted_speedup ** (1 /
    temperature): temperature 1 samples in proportion to predicted speedup, smaller values
    sharpen toward the best, temperature <= 0 is greedy (the first k of `ranked` by prediction).
    The same seed and input always give the same selection, in the order drawn."""
    if k <= 0 or not ranked:
        return []
    if temperature <= 0:
        return sorted(ranked, key=lambda r: -r.predicted_speedup)[:k]
    rng = random.Random(seed)
    keyed = []
    for item in ranked:
        # Gumbel-top-k: the k largest of log-weight + Gumbel noise are distributed exactly as
        # k draws without replacement, each in proportion to its weight.
        uniform = rng.random() or 5e-324  # random() is in [0, 1); keep log() finite
        gumbel = -math.log(-math.log(uniform))
        keyed.append((math.log(item.predicted_speedup) / temperature + gumbel, item))
    keyed.sort(key=lambda pair: -pair[0])
    return [item for _, item in keyed[:k]]


# --- assembling predictions for entries and rankings -----------------------------------------


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


def _prior(
    technique: Technique, here: EntryRow | None, ncu_gains: dict[str, float | None]
) -> tuple[float, Basis, str]:
    """The gain expected before any measurement, what kind of prior it is, and its source.
    A prior set by the policy update for this entry wins; then ncu's estimate for a finding the
    technique addresses (kernel-specific); then the catalog's rule of thumb."""
    if here is not None and here.prior_speedup is not None:
        gain = here.prior_speedup
        return gain, "prior", f"prior {gain:.2f}x set by policy update: {here.prior_source}"
    matched = [
        (gain, finding)
        for finding, gain in ncu_gains.items()
        if gain is not None and finding in technique.addresses_findings
    ]
    if matched:
        gain, finding = max(matched)
        saved = 100.0 * (1.0 - 1.0 / gain)
        return gain, "ncu_estimate", f"ncu: fixing {finding} saves ~{saved:.0f}% ({gain:.2f}x)"
    gain = technique.prior_speedup
    return gain, "prior", f"prior {gain:.2f}x ({technique.prior_source})"


def rank_technique(
    technique: Technique,
    arch: str,
    here: EntryRow | None,
    pooled: EntryCounts | None,
    ncu_gains: dict[str, float | None],
    notes: list[str],
) -> RankedTechnique:
    prior_gain, basis, explanation = _prior(technique, here, ncu_gains)
    prior_confidence = PRIOR_CONFIDENCE[basis]
    counts, weight = EntryCounts(), 1.0
    if here is not None and here.counts.attempts:
        counts, basis = here.counts, "this_arch"
        explanation += f"; {counts.attempts} attempts on {arch}"
    elif pooled is not None and pooled.attempts:
        counts, weight, basis = pooled, OTHER_ARCH_WEIGHT, "other_archs"
        explanation += (
            f"; none on {arch}, {pooled.attempts} on other architectures (weighted {weight})"
        )
    p = predict(prior_gain, counts, weight=weight, prior_confidence=prior_confidence)
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
        basis=basis,
        notes=notes,
        gain_if_verified=p.gain_if_verified,
        success_probability=p.success_probability,
        explanation=explanation,
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
