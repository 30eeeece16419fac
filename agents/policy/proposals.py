"""The open action space: where no KB technique fits a kernel's state (`why_propose`), the LLM
proposes new ones, which enter the KB as proposals on trial. Each item is validated on its own,
then rejected if it repeats a known id, names findings the kernel lacks, or rewords a known
technique (DUPLICATE_SIMILARITY). Every verdict is a ProposalVerdict in the run's result."""

from __future__ import annotations

import difflib
import time
from typing import Annotated

import msgspec

from kernelblaster.agents.llm.client import LlmClient, LlmError, Usage
from kernelblaster.agents.llm.prompting import bullets, describe_state, render_messages
from kernelblaster.agents.llm.reply_json import ask_json, text_problem, validate_items
from kernelblaster.harness.protocol.optimize_protocol import ProposalVerdict
from kernelblaster.harness.protocol.records import PerfState
from kernelblaster.kb.catalog import finding_kinds
from kernelblaster.kb.proposal_status import technique_id_problem
from kernelblaster.kb.records import Proposal, RankedTechnique, Technique, code_hash
from kernelblaster.kb.store import KnowledgeBase

MAX_PROPOSALS = 5  # accepted at once, whatever the request says: each costs trial steps
# Descriptions this similar (difflib's ratio) with the same findings are one technique reworded: a
# light rewording of a catalog description scores 0.93, no two catalog techniques sharing a finding
# score above 0.45 (tests/agents/policy/test_proposals.py).
DUPLICATE_SIMILARITY = 0.85
SOURCE_CHARS = 12_000  # of the kernel's source shown in the prompt
KNOWN_SHOWN = 40  # techniques of the state listed in the prompt


class ProposedTechnique(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One item of the LLM's answer, as the prompt asks for it."""

    id: Annotated[str, msgspec.Meta(min_length=3, max_length=48)]
    title: Annotated[str, msgspec.Meta(min_length=3, max_length=80)]
    description: Annotated[str, msgspec.Meta(min_length=20, max_length=600)]
    how_to_apply: Annotated[str, msgspec.Meta(min_length=20, max_length=1200)]
    addresses_findings: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=64)]], msgspec.Meta(min_length=1, max_length=6)
    ]
    prior_speedup: Annotated[float, msgspec.Meta(ge=1.0, le=10.0)]
    prior_reason: Annotated[str, msgspec.Meta(min_length=10, max_length=300)]


class _Reply(msgspec.Struct):
    techniques: list[msgspec.Raw]  # each validated on its own


class ProposalBatch(msgspec.Struct, kw_only=True):
    accepted: list[str] = []  # ids of the techniques now in the KB, on trial
    verdicts: list[ProposalVerdict] = []
    usage: Usage = Usage()
    error: str | None = None  # why no item could be read at all


def why_propose(
    kb: KnowledgeBase, state: PerfState, ranked: list[RankedTechnique], source_hash: str
) -> str | None:
    """Why the KB has no technique left for `state` on the source with `source_hash`, or None
    when it has one."""
    findings = {f.id for f in state.findings}
    if findings:
        techniques = {t.id: t for t in kb.techniques()}
        fitting = [
            r
            for r in ranked
            if r.technique in techniques
            and findings & set(techniques[r.technique].addresses_findings)
        ]
        if not fitting:
            return (
                f"no technique in the knowledge base addresses its findings "
                f"({', '.join(sorted(findings))})"
            )
    tried = {
        a.technique
        for a in kb.attempts(arch=state.arch, state=state.state, source_hash=source_hash)
        if a.outcome != "infrastructure"
    }
    if ranked and all(r.technique in tried for r in ranked):
        return f"all {len(ranked)} techniques ranked for it were already tried on this kernel"
    return None


def propose_where_needed(
    client: LlmClient, kb: KnowledgeBase, state: PerfState, *, kernel: str, source: str, limit: int
) -> ProposalBatch | None:
    """`propose` for `state` when the KB has nothing left for it on `source` (`why_propose`);
    None when it has. A model that can't be reached or gives no usable reply leaves a batch with
    no proposal and a verdict saying why (the step's own LLM call then meets the same model)."""
    ranked = kb.rank(state.arch, state.state, state.findings)
    why = why_propose(kb, state, ranked, code_hash(source))
    if why is None:
        return None
    try:
        batch = propose(
            client, kb, state, kernel=kernel, source=source, why=why, ranked=ranked, limit=limit
        )
    except LlmError as exc:
        batch = ProposalBatch(error=f"proposals for {state.state} skipped: {exc}")
    if batch.error is not None:
        batch.verdicts.append(
            ProposalVerdict(state=state.state, technique="", accepted=False, reason=batch.error)
        )
    return batch


def propose(
    client: LlmClient,
    kb: KnowledgeBase,
    state: PerfState,
    *,
    kernel: str,
    source: str,
    why: str,
    ranked: list[RankedTechnique],
    limit: int,
) -> ProposalBatch:
    """Ask for up to `limit` new techniques for `state` (of the kernel the user asked to
    optimize, `kernel`, as its attempts record it), keep the valid, new ones in the KB."""
    limit = max(0, min(limit, MAX_PROPOSALS))
    if limit == 0:
        return ProposalBatch()
    finding_ids = set(finding_kinds()) | {f.id for f in state.findings}
    known_lines = [f"`{r.technique}`: {r.title}" for r in ranked[:KNOWN_SHOWN]]
    answer = ask_json(
        client,
        render_messages(
            "propose_techniques",
            why=why,
            limit=limit,
            kernel=state.kernel,  # its name now: a rewrite may have renamed it
            arch=state.arch,
            state=describe_state(state),
            known=bullets(known_lines),
            finding_ids=", ".join(sorted(finding_ids)),
            source=source[:SOURCE_CHARS],
        ),
        _Reply,
        purpose="propose_techniques",
    )
    if answer.value is None:
        return ProposalBatch(usage=answer.usage, error=f"proposals unusable: {answer.error}")
    known = kb.techniques()
    items = answer.value.techniques
    accepted, rejected = validate_items(
        items,
        ProposedTechnique,
        lambda item, done: _problem(item, state, finding_ids, known, done, limit),
        normalize=_stripped,
    )
    batch = ProposalBatch(usage=answer.usage)
    batch.verdicts += [
        ProposalVerdict(
            state=state.state,
            technique=_id_of(items[r.index]),
            accepted=False,
            reason=r.reason,
            item=r.item,
        )
        for r in rejected
    ]
    for item in accepted:
        proposal = Proposal(
            technique=_technique(item, state, client.config.model),
            arch=state.arch,
            state=state.state,
            kernel=kernel,
            model=client.config.model,
            time=time.time(),
        )
        added = kb.propose(proposal)  # False: another rollout took the id meanwhile
        batch.verdicts.append(
            ProposalVerdict(
                state=state.state,
                technique=item.id,
                accepted=added,
                reason="" if added else f"duplicate: {item.id} was added to the KB meanwhile",
            )
        )
        if added:
            batch.accepted.append(item.id)
    return batch


def _stripped(item: ProposedTechnique) -> ProposedTechnique:
    return msgspec.structs.replace(
        item,
        id=item.id.strip(),
        title=item.title.strip(),
        description=item.description.strip(),
        how_to_apply=item.how_to_apply.strip(),
        prior_reason=item.prior_reason.strip(),
    )


def _problem(
    item: ProposedTechnique,
    state: PerfState,
    finding_ids: set[str],
    known: list[Technique],
    done: list[ProposedTechnique],
    limit: int,
) -> str | None:
    """Why a schema-valid proposal can't enter the KB, or None. Every item is judged; the
    valid ones after the first `limit` are turned away for count."""
    if problem := technique_id_problem(item.id):
        return problem
    if problem := text_problem(
        title=item.title,
        description=item.description,
        how_to_apply=item.how_to_apply,
        prior_reason=item.prior_reason,
    ):
        return problem
    if unknown := sorted(set(item.addresses_findings) - finding_ids):
        return f"addresses unknown findings {unknown}: use the kernel's or the known finding ids"
    kernel_findings = {f.id for f in state.findings}
    if kernel_findings and not kernel_findings & set(item.addresses_findings):
        return f"addresses none of this kernel's findings ({', '.join(sorted(kernel_findings))})"
    others: list[Technique | ProposedTechnique] = [*known, *done]
    for other in others:
        if other.id == item.id:
            return f"duplicate: {item.id} is already a technique of the knowledge base"
        if set(other.addresses_findings) == set(item.addresses_findings):
            similarity = description_similarity(other.description, item.description)
            if similarity >= DUPLICATE_SIMILARITY:
                return (
                    f"duplicate of {other.id}: the same findings and a near-identical "
                    f"description (similarity {similarity:.2f} >= {DUPLICATE_SIMILARITY})"
                )
    if len(done) >= limit:
        return f"beyond the {limit} asked for"
    return None


def description_similarity(a: str, b: str) -> float:
    """difflib's ratio of the two descriptions, lower-cased with whitespace collapsed."""
    return difflib.SequenceMatcher(
        None, " ".join(a.lower().split()), " ".join(b.lower().split()), autojunk=False
    ).ratio()


def _technique(item: ProposedTechnique, state: PerfState, model: str) -> Technique:
    return Technique(
        id=item.id,
        category="learned",
        title=item.title,
        description=item.description,
        how_to_apply=item.how_to_apply,
        addresses_states=[state.state],
        addresses_findings=list(item.addresses_findings),
        prior_speedup=item.prior_speedup,
        prior_source=f"proposed by {model}: {item.prior_reason}",
    )


def _id_of(raw: msgspec.Raw) -> str:
    """The id a rejected item claimed, if any can be read from it."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return ""
    found = value.get("id") if isinstance(value, dict) else None
    return found[:48] if isinstance(found, str) else ""
