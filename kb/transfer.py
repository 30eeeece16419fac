"""Export, import and merge a KB as JSON (records.KBExport), so a team can pool what it learned.
Statistics never travel: they are refolded from attempts keyed by id, so merging a file twice
can't double count. Of two priors the newer wins. Proposals travel with their provenance and
never replace a shipped catalog technique."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from kernelblaster.atomic_files import save_file
from kernelblaster.kb import rows
from kernelblaster.kb.database import Connection
from kernelblaster.kb.records import KBExport, clip_note
from kernelblaster.kb.stats import validate_attempt
from kernelblaster.kb.store import KnowledgeBase


class MergeReport(msgspec.Struct, kw_only=True):
    attempts_added: int = 0
    attempts_already_present: int = 0
    notes_added: int = 0
    priors_updated: int = 0
    techniques_added: int = 0
    states_added: int = 0
    proposals_changed: int = 0  # added, or a newer decision taken
    entries_recomputed: int = 0


def export_kb(kb: KnowledgeBase) -> KBExport:
    """Everything learned: techniques and states (catalog ones included, so a reader needs no
    catalog), priors set by policy updates, every note, every attempt, every proposal."""
    return KBExport(
        exported=time.time(),
        techniques=kb.techniques(),
        states=kb.states(),
        priors=kb.priors(),
        notes=kb.note_history(),
        attempts=kb.attempts()[::-1],
        proposals=kb.proposals(),
    )


def write_export(path: Path, data: KBExport, *, force: bool = False) -> None:
    """Write the JSON atomically: a reader never sees half a file. An existing file is
    replaced only with `force` (FileExistsError otherwise)."""
    text = msgspec.json.format(msgspec.json.encode(data), indent=1).decode()
    save_file(Path(path), text, force=force)


def read_export(path: Path) -> KBExport:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"can't read KB export {path}: {exc.strerror}") from exc
    try:
        return msgspec.json.decode(raw, type=KBExport)
    except msgspec.DecodeError as exc:
        raise ValueError(
            f"{path} is not a kernelblaster KB export ({exc}); create one with "
            "`kernelblaster kb export FILE`"
        ) from exc


def merge_kb(kb: KnowledgeBase, data: KBExport) -> MergeReport:
    """Add what `data` holds that the KB lacks, in one transaction, and recompute the statistics
    of every entry that gained attempts."""
    _validate(data)
    with kb.write_transaction() as conn:
        return _merge_in(conn, data)


def import_kb(kb: KnowledgeBase, data: KBExport, *, replace: bool = False) -> MergeReport:
    """Load an export into a KB that has learned nothing yet; with `replace`, discard what the
    KB learned (attempts, notes, priors, statistics) and load the export, in one transaction."""
    _validate(data)
    with kb.write_transaction() as conn:
        attempts = conn.execute("SELECT count(*) FROM attempts").fetchone()[0]
        notes = conn.execute("SELECT count(*) FROM notes").fetchone()[0]
        if (attempts or notes) and not replace:
            raise ValueError(
                f"the knowledge base at {kb.path} already holds {attempts} attempts and {notes} "
                "notes; use "
                "`kernelblaster kb merge FILE` to combine them, or `kb import --replace FILE` "
                "to discard them"
            )
        for table in ("attempts", "notes", "entries"):
            conn.execute(f"DELETE FROM {table}")
        return _merge_in(conn, data)


def _validate(data: KBExport) -> None:
    for attempt in data.attempts:
        validate_attempt(attempt)


def _merge_in(conn: Connection, data: KBExport) -> MergeReport:
    report = MergeReport()
    touched: set[tuple[str, str, str]] = set()
    known = rows.load_techniques(conn)
    for technique in data.techniques:
        if technique.id not in known:
            rows.put_technique(conn, technique, from_catalog=False)
            report.techniques_added += 1
    for state in data.states:
        report.states_added += rows.ensure_state(conn, state.id, state.description)
    for proposal in data.proposals:
        report.proposals_changed += rows.put_proposal(conn, proposal)
    for attempt in data.attempts:
        if rows.insert_attempt(conn, attempt):
            report.attempts_added += 1
            touched.add((attempt.arch, attempt.before_state, attempt.technique))
            if attempt.after_state:
                rows.ensure_state(conn, attempt.after_state)
        else:
            report.attempts_already_present += 1
    for note in data.notes:
        # An export is someone else's file: its notes are held to the same bound as ours.
        clipped = msgspec.structs.replace(note, text=clip_note(note.text))
        report.notes_added += rows.insert_note(conn, clipped)
    for prior in data.priors:
        report.priors_updated += rows.put_prior(conn, prior)
    for key in touched:
        rows.refold_entry(conn, *key)
    report.entries_recomputed = len(touched)
    return report
