"""Does stopping the timing once its median is pinned down change the figure?

    python3 -m bench.timing_plan [--examples relu softmax row_sum matmul] [--rounds 10]

Each round times each example's kernel twice, in turn: `pinned` (the stop rule of
harness/check/timing.py) and `full` (up to 200 repetitions in one second of device time). A
`pinned_over_full` ratio within the rounds' own spread says the shorter timing reports the same
figure. Writes bench/results/timing-plan-<gpu>.json."""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import REPO, write_result
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.check.timing import CudaClock, time_callable
from kernelblaster.harness.target.candidate import load_candidate
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings

PLANS = {"pinned": {}, "full": {"min_repetitions": 200}}


def _summary(timings: list, walls: list[float]) -> dict:
    medians = [t.median_ms for t in timings]
    return {
        "median_ms": statistics.median(medians),
        "spread": max(medians) / min(medians),
        "medians_ms": medians,
        "repetitions": [t.repetitions for t in timings],
        "p20_p80_ms": [[t.p20_ms, t.p80_ms] for t in timings],
        "wall_s": [round(w, 4) for w in walls],
    }


def measure(name: str, rounds: int, scratch: Path) -> dict:
    """Both plans on example `name`, built in a copy under `scratch`."""
    work = Path(shutil.copytree(REPO / "examples", scratch / name))
    settings = Settings(cache_dir=str(work / "cache"))
    target = resolve_target(work / f"{name}.cu", settings)
    assert isinstance(target, Target), target
    built = build(build_spec(target, settings), settings)
    assert built.ok and built.artifact, built.error
    device = torch.device("cuda", 0)
    reference = load_reference(Path(target.reference or ""), device)
    candidate = load_candidate(target, Path(built.artifact), reference, device)
    candidate.poison = False  # as timed in a check
    input_sets = [reference.inputs(seed, device) for seed in (1, 2, 3)]
    clock = CudaClock(device)
    timings: dict[str, list] = {plan: [] for plan in PLANS}
    walls: dict[str, list[float]] = {plan: [] for plan in PLANS}
    for _ in range(rounds):
        for plan, options in PLANS.items():
            began = time.perf_counter()
            timings[plan].append(time_callable(candidate, input_sets, clock=clock, **options))
            walls[plan].append(time.perf_counter() - began)
    result = {plan: _summary(timings[plan], walls[plan]) for plan in PLANS}
    result["pinned_over_full"] = result["pinned"]["median_ms"] / result["full"]["median_ms"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=["relu", "softmax", "row_sum", "matmul"])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.examples:
            results[name] = measure(name, args.rounds, Path(scratch))
            pinned, full = results[name]["pinned"], results[name]["full"]
            print(
                f"{name:10} pinned {pinned['median_ms']:.4f} ms (x{pinned['spread']:.4f}, "
                f"n={statistics.median(pinned['repetitions'])}, "
                f"{statistics.median(pinned['wall_s']):.3f} s)  full {full['median_ms']:.4f} ms "
                f"(x{full['spread']:.4f}, n={statistics.median(full['repetitions'])}, "
                f"{statistics.median(full['wall_s']):.3f} s)  "
                f"ratio {results[name]['pinned_over_full']:.4f}",
                flush=True,
            )
    print(f"wrote {write_result('timing-plan', {'rounds': args.rounds, 'examples': results})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
