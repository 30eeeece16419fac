"""The shipped seed catalog (kb/catalog/catalog.toml): performance states and techniques."""

from __future__ import annotations

import hashlib
import tomllib
from functools import cache
from importlib import resources

import msgspec

from kernelblaster.kb.records import State, Technique

FINDING_IDS = frozenset(
    {
        "uncoalesced_global_access",
        "shared_bank_conflicts",
        "small_grid",
        "tail_effect",
        "low_achieved_occupancy",
        "occupancy_limited_registers",
        "occupancy_limited_shared_memory",
        "occupancy_limited_block_size",
        "stall_long_scoreboard",
        "stall_barrier",
        "stall_math_pipe_throttle",
        "stall_lg_throttle",
        "thread_divergence",
        "low_issue_utilization",
        "register_spills",
    }
)
BOTTLENECKS = frozenset({"memory", "compute", "latency", "occupancy", "launch"})


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the entry and the problem."""


class Catalog(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    state: list[State]
    technique: list[Technique]
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


def _validate(catalog: Catalog) -> None:
    state_ids = [s.id for s in catalog.state]
    technique_ids = [t.id for t in catalog.technique]
    for kind, ids in (("state", state_ids), ("technique", technique_ids)):
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
        if unknown := sorted(set(technique.addresses_findings) - FINDING_IDS):
            raise CatalogError(f"{where} addresses unknown findings {unknown}")
        if not technique.addresses_states and not technique.addresses_findings:
            raise CatalogError(f"{where} addresses no state or finding")
        if not 1.0 <= technique.prior_speedup <= 10.0:
            raise CatalogError(f"{where}: prior_speedup must be in [1, 10]")
        if not technique.prior_source:
            raise CatalogError(f"{where} needs a prior_source saying where its prior comes from")
