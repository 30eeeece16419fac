"""`kernelblaster kb ...`: inspect, export, import and merge the knowledge base, and manage the
techniques agents proposed (`kb proposals list|promote|retire|rename`). No command that reads a
KB destroys one: `export` overwrites only with `--force`, never the KB itself, and a KB named
explicitly must exist, so a mistyped path doesn't become a new, empty KB (`kb init` makes one)."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

import msgspec

from kernelblaster.input_files import file_problem
from kernelblaster.kb.proposals import decide, proposal_views, rename
from kernelblaster.kb.schema import KBError
from kernelblaster.kb.store import KnowledgeBase, default_path, personal_path
from kernelblaster.kb.transfer import export_kb, import_kb, merge_kb, read_export, write_export
from kernelblaster.kb.view import kb_view
from kernelblaster.kb_location import is_postgres_url
from kernelblaster.settings import SettingsError, load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    kb = subparsers.add_parser("kb", help="inspect, export, import and merge the knowledge base")
    kb.add_argument(
        "--kb",
        help="KB file or team KB URL (postgresql://...); default: $KERNELBLASTER_KB, then "
        "kb_path, then the data dir",
    )
    commands = kb.add_subparsers(dest="kb_command", required=True, metavar="KB_COMMAND")

    commands.add_parser("path", help="print the KB file in use").set_defaults(func=_path)

    init = commands.add_parser("init", help="create a new, empty KB file (seeded catalog)")
    init.add_argument("file", type=Path)
    init.set_defaults(func=_init)

    stats = commands.add_parser("stats", help="totals: attempts, outcomes, architectures")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=_stats)

    show = commands.add_parser(
        "show",
        help="entries with their record (--json: with measured speedups and recent attempts); "
        "with --state and --arch, the ranking",
    )
    show.add_argument("--state", help="state id, e.g. memory.dram")
    show.add_argument("--arch", help="GPU architecture, e.g. sm_90")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_show)

    export = commands.add_parser("export", help="write everything learned to a JSON file")
    export.add_argument("file", type=Path)
    export.add_argument("--force", action="store_true", help="replace FILE if it exists")
    export.set_defaults(func=_export)

    load = commands.add_parser("import", help="load a JSON export into a KB with no attempts")
    load.add_argument("file", type=Path)
    load.add_argument("--replace", action="store_true", help="discard what this KB learned first")
    load.set_defaults(func=_import)

    merge = commands.add_parser("merge", help="add a JSON export's attempts and notes")
    merge.add_argument("file", type=Path)
    merge.set_defaults(func=_merge)

    commands.add_parser(
        "sync", help="send a team KB what was recorded while its server was unreachable"
    ).set_defaults(func=_sync)

    proposals = commands.add_parser(
        "proposals", help="techniques agents proposed: list, promote, retire, rename"
    )
    actions = proposals.add_subparsers(dest="proposals_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="each with its provenance, status and record")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_proposals_list)
    for command, decision, text in (
        ("promote", "promoted", "rank it like a catalog technique, whatever its outcomes"),
        ("retire", "retired", "stop ranking it, whatever its outcomes"),
    ):
        action = actions.add_parser(command, help=text)
        action.add_argument("technique", help="the proposed technique's id")
        action.add_argument("--reason", default="", help="why, kept with the decision")
        action.set_defaults(func=_proposals_decide, decision=decision)
    renaming = actions.add_parser("rename", help="give a proposal a new id (and title)")
    renaming.add_argument("technique", help="its id now")
    renaming.add_argument("new_id", help="lower-case letters, digits and underscores")
    renaming.add_argument("--title", help="a new title too")
    renaming.set_defaults(func=_proposals_rename)


class UsageError(ValueError):
    """What was asked can't be done as given (a path that isn't there, a file to keep)."""


def _resolve(args: argparse.Namespace) -> Path | str:
    """The KB named by --kb, KERNELBLASTER_KB, kb_path or the default; only kb_path is read
    from the repository's configuration, so no other setting there can stop a `kb` command."""
    if args.kb is not None:
        return args.kb if is_postgres_url(args.kb) else Path(args.kb)
    return default_path(load_settings(only=frozenset({"kb_path"})).kb_path)


def _existing(args: argparse.Namespace) -> Path | str:
    """The KB to use, which must exist unless it is the personal one (made on first use)."""
    location = _resolve(args)
    if isinstance(location, Path) and location.is_dir():
        raise UsageError(f"knowledge base {location} is a folder; name the KB file in it")
    if isinstance(location, Path) and location != personal_path() and not location.exists():
        raise UsageError(
            f"knowledge base {location} does not exist; `kernelblaster kb init {location}` "
            "creates one"
        )
    return location


def _open(args: argparse.Namespace) -> KnowledgeBase:
    return KnowledgeBase.open(_existing(args))


def _guarded(command):
    """Report bad files and settings as one line on stderr: exit status 2 for what was given
    (a path, a setting), 1 when the KB itself can't be used."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (UsageError, SettingsError) as exc:
            print(f"kernelblaster kb: {exc}", file=sys.stderr)
            return 2
        except (KBError, ValueError) as exc:
            print(f"kernelblaster kb: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            raise  # the reader went away: kernelblaster.cli ends quietly
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            print(
                f"kernelblaster kb: {exc.strerror or exc}{where}: check the path and that it "
                "is yours to read and write",
                file=sys.stderr,
            )
            return 1

    return run


@_guarded
def _path(args: argparse.Namespace) -> int:
    print(_resolve(args))
    return 0


@_guarded
def _init(args: argparse.Namespace) -> int:
    if args.file.exists():
        raise UsageError(f"{args.file} already exists; `kb --kb {args.file} stats` reads it")
    if not args.file.absolute().parent.is_dir():
        raise UsageError(f"the folder of {args.file} does not exist; create it first")
    with KnowledgeBase.open(args.file) as kb:
        print(f"created {kb.path} ({len(kb.techniques())} techniques, {len(kb.states())} states)")
    return 0


@_guarded
def _stats(args: argparse.Namespace) -> int:
    with _open(args) as kb:
        summary = kb.summary()
    if args.json:
        print(msgspec.json.encode(summary).decode())
        return 0
    for key, value in msgspec.structs.asdict(summary).items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
        print(f"{key.replace('_', ' '):>22}: {value}")
    return 0


@_guarded
def _show(args: argparse.Namespace) -> int:
    with _open(args) as kb:
        known = sorted(state.id for state in kb.states())
        if args.state and args.state not in known:
            print(
                f"kernelblaster kb: unknown state {args.state!r}; the KB knows: "
                + ", ".join(known),
                file=sys.stderr,
            )
            return 2
        if args.state and args.arch:
            ranked = kb.rank(args.arch, args.state)
            if args.json:
                print(msgspec.json.encode(ranked).decode())
                return 0
            print(f"ranking for {args.state} on {args.arch}")
            _print_table(
                ["technique", "predicted", "conf", "tries", "ok", "slower", "failed", "basis"],
                [
                    [
                        r.technique + (f" ({r.proposal})" if r.proposal else ""),
                        f"{r.predicted_speedup:.2f}x",
                        f"{r.confidence:.2f}",
                        r.attempts,
                        r.successes,
                        r.regressions,
                        r.failures,
                        r.basis,
                    ]
                    for r in ranked
                ],
            )
            return 0
        if args.json:
            print(msgspec.json.encode(kb_view(kb, arch=args.arch, state=args.state)).decode())
            return 0
        entries = [
            e
            for e in kb.entries(arch=args.arch, state=args.state)
            if e.attempts or e.notes or e.prior_speedup is not None
        ]
    if not entries:
        print("no attempts, notes or priors recorded yet")
        return 0
    _print_table(
        [
            "arch",
            "state",
            "technique",
            "tries",
            "ok",
            "slower",
            "failed",
            "geomean",
            "predicted",
            "conf",
            "notes",
        ],
        [
            [
                e.arch,
                e.state,
                e.technique,
                e.attempts,
                e.successes,
                e.regressions,
                e.failures,
                "-" if e.mean_log_speedup is None else f"{math.exp(e.mean_log_speedup):.2f}x",
                f"{e.predicted_speedup:.2f}x",
                f"{e.confidence:.2f}",
                len(e.notes),
            ]
            for e in entries
        ],
    )
    return 0


@_guarded
def _export(args: argparse.Namespace) -> int:
    location = _existing(args)
    _check_export_target(args.file, location, force=args.force)
    with KnowledgeBase.open(location) as kb:
        data = export_kb(kb)
    try:
        write_export(args.file, data, force=args.force)
    except FileExistsError as exc:
        raise UsageError(f"{args.file} appeared meanwhile; pass --force to replace it") from exc
    print(
        f"exported {len(data.attempts)} attempts, {len(data.notes)} notes, "
        f"{len(data.priors)} priors to {args.file}"
    )
    return 0


def _read_export(file: Path):
    if problem := file_problem(str(file)):
        raise UsageError(f"{problem}; pass a file written by `kernelblaster kb export`")
    return read_export(file)


@_guarded
def _import(args: argparse.Namespace) -> int:
    data = _read_export(args.file)
    with _open(args) as kb:
        report = import_kb(kb, data, replace=args.replace)
    _print_report(report)
    return 0


@_guarded
def _merge(args: argparse.Namespace) -> int:
    data = _read_export(args.file)
    with _open(args) as kb:
        report = merge_kb(kb, data)
    _print_report(report)
    return 0


@_guarded
def _sync(args: argparse.Namespace) -> int:
    from kernelblaster.kb.team import TeamKnowledgeBase

    location = _resolve(args)
    if not is_postgres_url(location):
        raise UsageError(f"{location} is not a team KB (a postgresql:// URL): nothing to sync")
    kb, _ = TeamKnowledgeBase.connect(str(location), personal_path())
    with kb:
        waiting, problem = kb.waiting(), kb.problem
    if waiting:
        print(
            f"kernelblaster kb: {waiting} changes still wait in {personal_path()}"
            + (f": {problem}" if problem else ""),
            file=sys.stderr,
        )
        return 1
    print(f"sent everything waiting for {location}")
    return 0


def _check_export_target(target: Path, location: Path | str, *, force: bool) -> None:
    """Refuse a target that is a folder, in a missing folder, the KB itself (or its WAL, its
    shared memory, its journal: writing there loses what was learned, --force or not), or an
    existing file without --force."""
    if target.is_dir():
        raise UsageError(f"{target} is a folder; name the file to write, e.g. {target / 'kb.json'}")
    if not target.absolute().parent.is_dir():
        raise UsageError(f"the folder of {target} does not exist; create it first")
    if isinstance(location, Path):
        kb_files = [Path(f"{location}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]
        if any(_same_file(target, kb_file) for kb_file in kb_files):
            raise UsageError(
                f"{target} is the knowledge base being exported ({location}); export to another "
                "file"
            )
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to replace it")


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)  # also a link or a second name of the same file
    return a.resolve() == b.resolve()


@_guarded
def _proposals_list(args: argparse.Namespace) -> int:
    with _open(args) as kb:
        views = proposal_views(kb)
    if args.json:
        print(msgspec.json.encode(views).decode())
        return 0
    if not views:
        print(
            "no proposed techniques yet: the optimize loop proposes some for a state when the "
            "KB has none left that fit"
        )
        return 0
    _print_table(
        ["technique", "status", "tries", "ok", "slower", "failed", "geomean", "proposed for"],
        [
            [
                v.technique,
                v.status,
                v.attempts,
                v.successes,
                v.regressions,
                v.failures,
                "-" if v.mean_speedup is None else f"{v.mean_speedup:.2f}x",
                f"{v.state} on {v.arch} ({v.kernel}, {v.model}, "
                f"{time.strftime('%Y-%m-%d', time.localtime(v.time))})",
            ]
            for v in views
        ],
    )
    return 0


@_guarded
def _proposals_decide(args: argparse.Namespace) -> int:
    with _open(args) as kb:
        decide(kb, args.technique, args.decision, args.reason)
    print(f"{args.technique}: {args.decision}")
    return 0


@_guarded
def _proposals_rename(args: argparse.Namespace) -> int:
    with _open(args) as kb:
        rename(kb, args.technique, args.new_id, title=args.title)
    print(f"{args.technique} is now {args.new_id}")
    return 0


def _print_report(report: msgspec.Struct) -> None:
    for key, value in msgspec.structs.asdict(report).items():
        print(f"{key.replace('_', ' '):>26}: {value}")


_NUMBER = re.compile(r"^-?[\d.]+x?$")


def _print_table(headers: list[str], rows: list[list[object]]) -> None:
    """A plain-text table; columns whose cells are all numbers are right-aligned."""
    cells = [headers, *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(_NUMBER.match(row[i]) or row[i] == "-" for row in cells[1:])
        for i in range(len(headers))
    ]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if right else c.ljust(w)
                for c, w, right in zip(row, widths, numeric, strict=True)
            ).rstrip()
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))
