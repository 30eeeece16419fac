"""Run the adversarial suite (tests/adversarial/suite.py) through the real harness on this
machine's GPU: every reward hack must be caught and named, every honest twin must pass.

    python bench/adversarial.py [--cases kb_side_stream relu_good ...]

Each case runs as `kernelblaster check` runs it (a fresh worker process: build, verify, time,
baselines). Writes bench/results/adversarial-<gpu>.json, one entry per case (name, `honest` or
the hack class, expected and actual verdict, findings, the kernel's time, PyTorch eager's and
the speedup over it, seconds), prints a table, and exits 1 if any case got a verdict other
than the one expected. A case aimed at the baselines (`pass:untampered_baseline`) is judged
against its honest twin's eager time, the twin run first where this run has not. The
KernelBench-format cases share one load_inline extension, built by the first of them (~45 s);
each PyTorch-extension case is built on its own (~20 s); torch.compile baselines are measured
once per reference and cached (a case aimed at them measures its own)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.adversarial
from common import RESULTS, device_name, slug, write_result

from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from tests.adversarial.suite import (
    BY_NAME,
    CASES,
    UNTAMPERED_BASELINE,
    Case,
    as_expected,
    baseline_verdict,
    eager_ms,
    findings,
    run_case,
    verdict,
    write_kernelbench_cases,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", help="only these case names")
    parser.add_argument(
        "--resume", action="store_true", help="keep this GPU's earlier results; run the rest"
    )
    args = parser.parse_args()
    entries = _earlier_entries() if args.resume else []
    done = {entry["name"] for entry in entries}
    chosen = [
        case
        for case in CASES
        if (not args.cases or case.name in args.cases) and case.name not in done
    ]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kb-adversarial-") as scratch:
        kernelbench_dir, cache_dir = Path(scratch) / "kernelbench", Path(scratch) / "cache"
        write_kernelbench_cases(kernelbench_dir)
        responses: dict[str, WorkerResponse] = {}

        def respond(case: Case) -> WorkerResponse:
            if case.name not in responses:
                responses[case.name] = run_case(case, kernelbench_dir, cache_dir)
            return responses[case.name]

        for case in chosen:
            started = time.perf_counter()
            response = respond(case)
            if case.expected == UNTAMPERED_BASELINE:
                assert case.twin is not None
                actual = baseline_verdict(response, respond(BY_NAME[case.twin]))
            else:
                actual = verdict(response)
            check = response.check
            timing = check.timing if check else None
            entries.append(
                {
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
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
            print(_row(entries[-1]), flush=True)
            _write(entries)  # after every case: a run cut short keeps what it measured
    path = _write(entries)
    caught = sum(e["as_expected"] for e in entries)
    print(
        f"{caught} of {len(entries)} cases as expected "
        f"(this run: {time.perf_counter() - began:.1f} s); wrote {path}"
    )
    return 0 if caught == len(entries) else 1


def _write(entries: list[dict]) -> Path:
    caught = sum(e["as_expected"] for e in entries)
    seconds = round(sum(e["seconds"] for e in entries), 1)
    return write_result(
        "adversarial",
        {"cases": entries, "as_expected": caught, "total": len(entries), "seconds": seconds},
    )


def _earlier_entries() -> list[dict]:
    path = RESULTS / f"adversarial-{slug(device_name())}.json"
    return json.loads(path.read_text())["cases"] if path.exists() else []


def _row(entry: dict) -> str:
    mark = "ok " if entry["as_expected"] else "BAD"
    return (
        f"{mark} {entry['name']:<24} {entry['class']:<22} expected {entry['expected']:<22} "
        f"got {entry['actual']:<34} {entry['seconds']:6.1f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
