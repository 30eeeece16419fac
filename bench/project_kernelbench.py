"""KernelBench's wall time at the paper's budget, projected from bench/optimize_throughput.py.

    python3 -m bench.project_kernelbench                 # prints the table for every GPU measured
    python3 -m bench.project_kernelbench --write         # and rewrites docs/kernelbench.md's table

With c a candidate's cost, F a problem's fixed cost, S_N the rollouts' scaling on N GPUs, R x D
candidates and L seconds per LLM call (two per step, two for the policy update), a problem takes
F + R*D*c / S_N without the LLM, and F + 2L + max(D*(2L + c), R*D*c / S_N) with it. 100 problems
per level."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench.common import REPO, RESULTS

ROLLOUTS, DEPTH = 10, 10  # the paper's budget
PROBLEMS = {"level1": 100, "level2": 100}
LLM_CALL_S = 10.0  # the stated latency of one LLM call
GPU_COUNTS = ("1", "2", "4")
PAGE = REPO / "docs" / "kernelbench.md"  # the projection's table lives between its markers
PAGE_BLOCK = re.compile(
    r"(<!-- kernelbench-projection:begin -->\n).*?(<!-- kernelbench-projection:end -->)", re.S
)


def projection(measured: dict, llm_call_s: float = LLM_CALL_S) -> dict:
    """Hours per level and GPU count, with and without the LLM, from one results file; a GPU
    count whose scaling was not measured is left out."""
    scaling = {"1": 1.0, **measured.get("rollouts_scaling", {})}
    rows = {}
    for level, problems in PROBLEMS.items():
        own = measured.get("by_level", {}).get(level, {})
        c = own.get("per_candidate_overhead_p50_s") or measured["per_candidate_overhead_p50_s"]
        fixed = own.get("per_problem_fixed_s") or measured["per_problem_fixed_s"]
        candidates = ROLLOUTS * DEPTH
        rows[level] = {
            "own": bool(own),  # else the median over every level measured stands in for it
            "candidate_s": c,
            "fixed_s": fixed,
            "hours": {
                n: {
                    "without_llm": problems * (fixed + candidates * c / scaling[n]) / 3600,
                    "with_llm": problems
                    * (
                        fixed
                        + 2 * llm_call_s
                        + max(DEPTH * (2 * llm_call_s + c), candidates * c / scaling[n])
                    )
                    / 3600,
                }
                for n in GPU_COUNTS
                if n in scaling
            },
        }
    return rows


def markdown(device: str, measured: dict, source: str, llm_call_s: float = LLM_CALL_S) -> str:
    rows = projection(measured, llm_call_s)
    problems = measured.get("candidates", {}).get("problems", {})
    measured_on = ", ".join(f"{lv}/{p}" for lv, names in problems.items() for p in names)
    counts = [n for n in GPU_COUNTS if n in rows["level1"]["hours"]]
    header = " | ".join(f"{n} GPU{'s' if n != '1' else ''}" for n in counts)
    lines = [
        f"KernelBench at the paper's budget ({ROLLOUTS} rollouts x {DEPTH} steps per problem, "
        f"{PROBLEMS['level1']} problems per level) on {device}, from `{source}` "
        f"(`bench/project_kernelbench.py`): hours without the LLM / with an LLM answering each "
        f"call in {llm_call_s:.0f} s.",
        "",
        f"| level | candidate | fixed per problem | {header} |",
        "|---|---|---|" + "---|" * len(counts),
    ]
    for level, row in rows.items():
        cells = " | ".join(
            f"{row['hours'][n]['without_llm']:.1f} h / {row['hours'][n]['with_llm']:.1f} h"
            for n in counts
        )
        name = level if row["own"] else f"{level} (none measured: the other level's)"
        lines.append(f"| {name} | {row['candidate_s']:.1f} s | {row['fixed_s']:.1f} s | {cells} |")
    notes = [f"candidates and fixed cost measured on {measured_on}"] if measured_on else []
    if "llm_overlap_ratio" in measured:
        notes.append(
            f"measured llm_overlap_ratio {measured['llm_overlap_ratio']:.2f} (1.0: the LLM's "
            "waits and the GPU's work fully overlapped)"
        )
    if "rollouts_scaling" in measured:
        notes.append(
            "rollouts scaling "
            + ", ".join(f"{v:.2f}x on {n} GPUs" for n, v in measured["rollouts_scaling"].items())
        )
    else:
        notes.append("2 and 4 GPUs: scaling not measured yet")
    lines += ["", "; ".join(notes) + "."]
    return "\n".join(lines) + "\n"


def with_table(page: str, table: str) -> str:
    """`page` with `table` between its kernelbench-projection markers."""
    if not PAGE_BLOCK.search(page):
        raise ValueError(f"{PAGE.relative_to(REPO)} has no kernelbench-projection block")
    return PAGE_BLOCK.sub(lambda m: m.group(1) + table + m.group(2), page)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="default: every measured GPU's")
    parser.add_argument("--llm-call-s", type=float, default=LLM_CALL_S)
    parser.add_argument("--write", action="store_true", help=f"rewrite {PAGE.name}'s table")
    args = parser.parse_args()
    files = args.files or sorted(RESULTS.glob("optimize-throughput-*.json"))
    if not files:
        print(
            "no optimize-throughput-*.json: run python -m bench.optimize_throughput",
            file=sys.stderr,
        )
        return 2
    tables = []
    for path in files:
        measured = json.loads(path.read_text())
        if "per_candidate_overhead_p50_s" not in measured:
            print(f"{path}: no candidates measured (--part single)", file=sys.stderr)
            continue
        source = path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path
        tables.append(markdown(measured["device"], measured, str(source), args.llm_call_s))
    text = "\n".join(tables)
    print(text)
    if args.write and tables:
        try:
            PAGE.write_text(with_table(PAGE.read_text(), text))
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(f"rewrote the projection in {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
