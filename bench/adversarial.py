"""Run the adversarial suite on this GPU: every hack must be caught and named, every twin pass.

    python -m bench.adversarial [--cases kb_side_stream relu_good ...] [--jobs 16]
    python -m bench.adversarial --budget-s 420          # stops before a case would pass it
    python -m bench.adversarial --resume                # runs the cases not yet in the file

Builds and baselines come first (`prepare`), then each case's check one at a time in a spare
worker started beside the one before (`--fresh-workers`: as `kernelblaster check` does). Writes
bench/results/adversarial-<gpu>.json after every case; every entry records the digests of the
verifier and suite it ran on, and `--resume` refuses (exit 2) a file from other code. Exits 0
when every case ran as expected, 1 otherwise, 3 when --budget-s stopped it."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import kernelblaster
import kernelblaster.harness
from bench.adversarial_suite import (
    BY_NAME,
    CASES,
    CASES_DIR,
    REPO,
    SUITE,
    UNTAMPERED_BASELINE,
    Ahead,
    Case,
    as_expected,
    baseline_verdict,
    case_request,
    eager_ms,
    findings,
    prepare,
    source_path,
    verdict,
    write_kernelbench_cases,
)
from bench.common import (
    RESULTS,
    device_name,
    files_digest,
    git_commit,
    slug,
    tree_files,
    write_result,
)
from kernelblaster.harness.protocol.worker_client import (
    SpareWorkers,
    keep_spare_workers,
    run_harness_sync,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse

# Seconds a case is expected to take before this run has timed any (--budget-s)
FIRST_CASE_S = 20.0


def code_identity() -> dict[str, str | None]:
    """What the cases run on: the digest of the verifier's sources (every file of the harness
    and of the kernelblaster package, as imported: what the worker runs), the digest of the
    suite's own files (its cases, references and sources) and the git commit, if any."""
    packages = [Path(kernelblaster.__file__).parent, Path(kernelblaster.harness.__file__).parent]
    suite = [
        SUITE,
        *tree_files(CASES_DIR),
        *(case.reference for case in CASES),
        *(source_path(case, CASES_DIR) for case in CASES if case.form != "kernelbench"),
    ]
    return {
        "verifier": files_digest([f for p in packages for f in tree_files(p)], packages[0].parent),
        "suite": files_digest(suite, REPO),
        "commit": git_commit(),
    }


class SparesBeside(SpareWorkers):
    """Spare workers for checks run one after another: each check's successor starts with it,
    imports torch meanwhile, and touches the GPU only once that check's worker has exited
    (GPU_FREE_FD_ENV), as the language server's spares do when saves come fast."""

    def short(self, command: list[str], gpu_index: int = 0) -> bool:
        return True


@contextlib.contextmanager
def checker(fresh: bool) -> Iterator[Callable[[WorkerRequest], WorkerResponse]]:
    """Runs a check request: in a fresh worker each (`fresh`: as `kernelblaster check` does),
    else in a spare started beside the check before it (SparesBeside), killed at the end."""
    with contextlib.nullcontext() if fresh else keep_spare_workers(SparesBeside()):
        yield lambda request: run_harness_sync(request, request.settings)


def resume_refusal(earlier: dict, code: dict[str, str | None], out: Path) -> str | None:
    """Why the entries of an earlier file can't be resumed on `code`, or None."""
    ran_on = Counter((e.get("verifier"), e.get("suite")) for e in earlier.get("cases", []))
    others = {key: n for key, n in ran_on.items() if key != (code["verifier"], code["suite"])}
    if not others:
        return None
    (verifier, suite), count = max(others.items(), key=lambda item: item[1])
    commits = sorted({str(e.get("commit")) for e in earlier["cases"]})
    if verifier is None or suite is None:
        what = "record no verifier and suite digest (written before this bench recorded them)"
    elif verifier != code["verifier"]:
        what = (
            f"ran on verifier {verifier[:12]}; this checkout's is {str(code['verifier'])[:12]} "
            "(its files under harness/ or kernelblaster/ differ)"
        )
    else:
        what = (
            f"ran on suite {suite[:12]}; this checkout's is {str(code['suite'])[:12]} "
            "(the suite, or a case, reference or source under bench/adversarial_cases/, differs)"
        )
    return (
        f"refusing to resume {out}: {count} of its {sum(ran_on.values())} cases {what}, "
        f"at commit(s) {', '.join(commits)}; this checkout is at {code['commit']}. A resumed "
        "run would mix two verifiers in one file. Run without --resume to start over (the file "
        "is replaced), or check that commit out to finish its run."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", help="only these case names")
    parser.add_argument(
        "--resume", action="store_true", help="keep the file's earlier results; run the rest"
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="builds at once (default: cores)"
    )
    parser.add_argument(
        "--budget-s", type=float, help="start no case that would end past this many seconds"
    )
    parser.add_argument("--out", type=Path, help="result JSON (default: under bench/results/)")
    parser.add_argument(
        "--fresh-workers",
        action="store_true",
        help="start each check's worker when its check starts, as `kernelblaster check` does "
        "(default: a spare started beside the check before it, as the optimize loop's and the "
        "language server's are)",
    )
    args = parser.parse_args(argv)
    if unknown := set(args.cases or []) - set(BY_NAME):
        print(f"error: unknown case(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    out = args.out or RESULTS / f"adversarial-{slug(device_name())}.json"
    code = code_identity()
    entries: list[dict] = []
    runs: list[dict] = []
    if args.resume and out.exists():
        earlier = json.loads(out.read_text())
        if (refusal := resume_refusal(earlier, code, out)) is not None:
            print(f"error: {refusal}", file=sys.stderr)
            return 2
        entries, runs = earlier["cases"], earlier.get("runs", [])
    done = {entry["name"] for entry in entries}
    chosen = [
        case
        for case in CASES
        if (not args.cases or case.name in args.cases) and case.name not in done
    ]
    began = time.perf_counter()
    run = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **code,
        "jobs": args.jobs,
        "workers": "fresh" if args.fresh_workers else "spare, started beside the check before",
        "cases": 0,
    }
    if chosen:
        runs.append(run)
    stopped = False
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="kb-adversarial-"))
        kernelbench_dir, cache_dir = Path(scratch) / "kernelbench", Path(scratch) / "cache"
        write_kernelbench_cases(kernelbench_dir)
        twins = [BY_NAME[c.twin] for c in chosen if c.expected == UNTAMPERED_BASELINE and c.twin]
        ahead = prepare(
            [*chosen, *(t for t in twins if t not in chosen)],
            kernelbench_dir,
            cache_dir,
            jobs=args.jobs,
        )
        run["prepare"] = _prepare_record(ahead)
        print(_prepared(ahead, args.jobs), flush=True)
        responses: dict[str, WorkerResponse] = {}
        check = stack.enter_context(checker(args.fresh_workers))

        def respond(case: Case) -> WorkerResponse:
            if case.name not in responses:
                responses[case.name] = check(
                    case_request(case, "check", kernelbench_dir, cache_dir)
                )
            return responses[case.name]

        timed: list[float] = []  # this run's cases' seconds
        for case in chosen:
            expected_s = max(timed[-5:], default=FIRST_CASE_S)
            if args.budget_s is not None and _elapsed(began) + expected_s > args.budget_s:
                stopped = True
                break
            started = time.perf_counter()
            response = respond(case)
            if case.expected == UNTAMPERED_BASELINE:
                assert case.twin is not None
                actual = baseline_verdict(response, respond(BY_NAME[case.twin]))
            else:
                actual = verdict(response)
            timed.append(_elapsed(started))
            entries.append(
                {**_entry(case, response, actual, timed[-1], code), "run": len(runs) - 1}
            )
            run["cases"] += 1
            run["seconds"] = round(_elapsed(began), 1)
            print(_row(entries[-1]), flush=True)
            _write(out, entries, runs)  # after every case: a run cut short keeps what it measured
    run["seconds"] = round(_elapsed(began), 1)
    _write(out, entries, runs)
    print(_summary(entries, run, len(runs), out, stopped), flush=True)
    if any(not e["as_expected"] for e in entries):
        return 1
    return 3 if stopped else 0


def _elapsed(since: float) -> float:
    return time.perf_counter() - since


def _entry(case: Case, response: WorkerResponse, actual: str, seconds: float, code: dict) -> dict:
    check = response.check
    timing = check.timing if check else None
    build = response.build
    return {
        "name": case.name,
        "form": case.form,
        "class": case.hack_class,
        "twin": case.twin,
        "expected": case.expected,
        "actual": actual,
        "as_expected": as_expected(case.expected, actual),
        "findings": findings(response),
        "kernel_ms": timing.median_ms if timing else None,
        "eager_ms": eager_ms(response),
        "speedup_vs_eager": check.speedup_vs_eager if check else None,
        "seconds": round(seconds, 2),
        # where the check's seconds went; its build's (a cache hit after `prepare`)
        "phase_seconds": dict(check.phase_seconds) if check else {},
        "build_seconds": round(build.seconds, 2) if build else None,
        "build_cached": build.cached if build else None,
        "verifier": code["verifier"],
        "suite": code["suite"],
        "commit": code["commit"],
    }


def _write(out: Path, entries: list[dict], runs: list[dict]) -> Path:
    ran_on = Counter(e["verifier"] for e in entries)
    verifier = next(iter(ran_on)) if len(ran_on) == 1 else None
    return write_result(
        "adversarial",
        {
            "cases": entries,
            "as_expected": sum(e["as_expected"] for e in entries),
            "total": len(entries),
            "seconds": round(sum(e["seconds"] for e in entries), 1),
            # every entry on one verifier (its digest), or None and the count per digest
            "verifier": verifier,
            "verifiers": dict(ran_on),
            "suite": sorted({e["suite"] for e in entries}),
            "not_run": [c.name for c in CASES if c.name not in {e["name"] for e in entries}],
            "runs": runs,
        },
        out,
    )


def _prepare_record(ahead: Ahead) -> dict:
    """Where the preparation's seconds went: each build's, and each reference's baselines
    measured apart (the GPU turn's seconds, `gpu_s`, and the worker's parts)."""
    return {
        "seconds": round(ahead.seconds, 1),
        "builds": {
            name: round(r.build.seconds, 1) if r.build else None for name, r in ahead.builds.items()
        },
        "baselines_apart": {
            Path(reference).name: {"gpu_s": phases.evaluation, **phases.parts}
            for reference, phases in ahead.baselines.items()
            if reference not in ahead.baseline_errors
        },
        "baseline_errors": {Path(r).name: e for r, e in ahead.baseline_errors.items()},
    }


def _prepared(ahead: Ahead, jobs: int) -> str:
    builds = ahead.builds
    failed = [name for name, r in builds.items() if r.build is None or not r.build.ok]
    slowest = max((r.build.seconds for r in builds.values() if r.build), default=0.0)
    lines = [
        f"prepared in {ahead.seconds:.1f} s: {len(builds)} builds, {jobs} at a time (slowest "
        f"{slowest:.1f} s), and the baselines of {len(ahead.baselines)} reference(s) measured "
        "apart"
    ]
    lines += [f"  build failed ahead (its check reports it): {name}" for name in failed]
    lines += [
        f"  baselines of {Path(ref).name} not measured apart (its checks measure them): {error}"
        for ref, error in ahead.baseline_errors.items()
    ]
    return "\n".join(lines)


def _summary(entries: list[dict], run: dict, runs: int, out: Path, stopped: bool) -> str:
    caught = sum(e["as_expected"] for e in entries)
    ran_on = Counter((e["verifier"][:12], e["suite"][:12], e["commit"]) for e in entries)
    code = "; ".join(
        f"{n} on verifier {v} (suite {s}, commit {c})" for (v, s, c), n in ran_on.items()
    )
    left = [c.name for c in CASES if c.name not in {e["name"] for e in entries}]
    lines = [
        f"{caught} of {len(entries)} cases as expected, in {runs} run(s) "
        f"(this one: {run['cases']} cases, {run['seconds']:.1f} s); {code}",
        f"wrote {out}",
    ]
    if left:
        why = "stopped by --budget-s" if stopped else "not chosen"
        lines.append(
            f"{len(left)} of the suite's {len(CASES)} cases not run ({why}): run again "
            f"with --resume to add them: {' '.join(left)}"
        )
    return "\n".join(lines)


def _row(entry: dict) -> str:
    mark = "ok " if entry["as_expected"] else "BAD"
    return (
        f"{mark} {entry['name']:<24} {entry['class']:<22} expected {entry['expected']:<22} "
        f"got {entry['actual']:<34} {entry['seconds']:6.1f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
