"""How a proposed technique (records.Proposal) stands: on trial, promoted or retired. A proposal is
an LLM's unmeasured claim, so its measured outcomes over every arch and state decide: promoted
after PROMOTE_AFTER verified successes (then ranked like a catalog technique), retired after
RETIRE_AFTER failures with no success. A user's decision overrides both."""

from __future__ import annotations

import re

from kernelblaster.kb.records import ProposalDecision, ProposalStatus
from kernelblaster.kb.stats import EntryCounts

# Two: one success can be the timing spread of a small kernel or a lucky rewrite; two verified
# wins (on one kernel or several) are the least evidence we accept that the trick is real.
PROMOTE_AFTER = 2
# Three: the lowering agent already retries within an attempt, so three failed attempts with no
# success are three rewrites from scratch that it could not make verify and pay off.
RETIRE_AFTER = 3
# What an untried proposal is predicted to gain if it verifies, at most: the LLM's prior is a
# guess with no measurement behind it, so it never outranks a catalog technique by its claim.
PROPOSAL_PRIOR_CAP = 1.1
# A technique id: what prompts, attempts and the CLI quote, so short, lower-case, no spaces.
TECHNIQUE_ID = re.compile(r"[a-z][a-z0-9_]{2,47}")


def status(decision: ProposalDecision | None, counts: EntryCounts) -> tuple[ProposalStatus, str]:
    """The status of a proposal with a user's `decision` (or none) and the summed `counts` of
    its attempts, and why, in words."""
    record = (
        f"{counts.successes} success(es), {counts.regressions} regression(s), "
        f"{counts.failures} failure(s)"
    )
    if decision is not None:
        return decision, f"{decision} by a user; {record}"
    if counts.successes >= PROMOTE_AFTER:
        return "promoted", f"{record}: at least {PROMOTE_AFTER} verified successes"
    if counts.successes == 0 and counts.attempts >= RETIRE_AFTER:
        return "retired", f"{record}: {RETIRE_AFTER}+ attempts and no success"
    return (
        "proposed",
        f"{record}: on trial until {PROMOTE_AFTER} successes or {RETIRE_AFTER} attempts with none",
    )


def technique_id_problem(technique_id: str) -> str | None:
    """Why `technique_id` can't name a technique, or None."""
    if TECHNIQUE_ID.fullmatch(technique_id):
        return None
    return (
        f"technique id {technique_id!r} must be 3 to 48 characters of lower-case letters, "
        "digits and underscores, starting with a letter (e.g. warp_shuffle_row_reduce)"
    )
