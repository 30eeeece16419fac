"""The shipped seed catalog (kb/catalog/catalog.toml): performance states, the findings the
classifier reports, and techniques."""

from __future__ import annotations

import hashlib
import tomllib
from functools import cache
from importlib import resources
from typing import Literal, TypeGuard

import msgspec

from kernelblaster.kb.records import Bottleneck, State, Technique

BOTTLENECKS = frozenset({"memory", "compute", "latency", "occupancy", "launch"})


def is_bottleneck(name: str) -> TypeGuard[Bottleneck]:
    """Whether `name` is one of BOTTLENECKS (a state's bottleneck, other than "unknown")."""
    return name in BOTTLENECKS


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the entry and the problem."""


FindingKind = Literal["cause", "stall", "symptom"]


class CatalogFinding(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A finding the classifier can report, and how directly fixing it fixes the kernel."""

    id: str  # e.g. "uncoalesced_global_access"
    kind: FindingKind  # a defect in the code, a stall reason, or a general symptom
    description: str = ""


class Enabler(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A technique that prepares the code for others and may not pay on its own (tiling before
    tensor cores). The loop keeps its verified step although it is not yet faster and judges
    it by the best candidate reached from it (agents/loop/rollout.py)."""

    technique: str
    enables: list[str]  # the techniques it prepares for
    why: str


class Catalog(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    state: list[State]
    finding: list[CatalogFinding] = []
    technique: list[Technique]
    enabler: list[Enabler] = []
    digest: str = ""  # sha256 of the file, so a KB re-syncs only when the catalog changed


def parse_catalog(text: str) -> Catalog:
    try:
        catalog = msgspec.convert(tomllib.loads(text), Catalog)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise CatalogError(f"catalog: {exc}") from exc
    _validate(catalog)
    catalog.digest = hashlib.sha256(text.encode()).hexdigest()
    return catalog


@cache
def load_catalog() -> Catalog:
    text = resources.files("kernelblaster.kb").joinpath("catalog/catalog.toml").read_text("utf-8")
    return parse_catalog(text)


@cache
def finding_kinds() -> dict[str, FindingKind]:
    """The shipped catalog's finding id -> kind."""
    return {finding.id: finding.kind for finding in load_catalog().finding}


@cache
def enablers() -> frozenset[str]:
    """The shipped catalog's enabler technique ids. Shipped knowledge, like the findings'
    kinds: the KB's learned data (priors, notes, counts) does not change what a technique
    prepares for, so it is read from the catalog rather than stored per KB."""
    return frozenset(enabler.technique for enabler in load_catalog().enabler)


def _validate(catalog: Catalog) -> None:
    state_ids = [s.id for s in catalog.state]
    finding_ids = [f.id for f in catalog.finding]
    technique_ids = [t.id for t in catalog.technique]
    for kind, ids in (("state", state_ids), ("finding", finding_ids), ("technique", technique_ids)):
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise CatalogError(f"catalog: duplicate {kind} ids {duplicates}")
    for state in catalog.state:
        if state.id.split(".")[0] != state.bottleneck:
            raise CatalogError(f"catalog: state {state.id} must start with its bottleneck")
    known_states = set(state_ids) | BOTTLENECKS
    for technique in catalog.technique:
        where = f"catalog: technique {technique.id}"
        if unknown := sorted(set(technique.addresses_states) - known_states):
            raise CatalogError(f"{where} addresses unknown states {unknown}")
        if unknown := sorted(set(technique.addresses_findings) - set(finding_ids)):
            raise CatalogError(f"{where} addresses unknown findings {unknown}")
        if not technique.addresses_states and not technique.addresses_findings:
            raise CatalogError(f"{where} addresses no state or finding")
        if not 1.0 <= technique.prior_speedup <= 10.0:
            raise CatalogError(f"{where}: prior_speedup must be in [1, 10]")
        if not technique.prior_source:
            raise CatalogError(f"{where} needs a prior_source saying where its prior comes from")
    for enabler in catalog.enabler:
        if unknown := sorted({enabler.technique, *enabler.enables} - set(technique_ids)):
            where = f"catalog: enabler {enabler.technique}"
            raise CatalogError(f"{where} names unknown techniques {unknown}")
