"""nvcc as one command against its steps split by the harness (harness/build/nvcc_steps.py).

    python -m bench.build_steps [--examples relu softmax ...] [--builds 10]

Each example's exact nvcc command runs `--builds` times each way, alternating, into fresh folders
with the same paths. Records each way's wall time, the split's stages, and whether every split
artifact was byte-identical to nvcc's. Writes bench/results/build-steps-<gpu>.json."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import write_result
from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.build.nvcc_steps import run_nvcc
from kernelblaster.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _harness_command(source: Path, scratch: Path) -> list[str]:
    """The nvcc command the harness runs for `source`, with its output and intermediate
    files under `scratch/work` instead of the build cache's scratch directory."""
    built = build(
        BuildSpec(source=str(source), output_kind="shared"), Settings(), cache_dir=scratch
    )
    assert built.ok, built.error
    work = scratch / "work"
    command = []
    for part in built.command:
        if part.startswith("-keep-dir="):
            part = f"-keep-dir={work / 'keep'}"
        elif part.endswith(".so"):
            part = str(work / "out.so")
        command.append(part)
    return command


def _once(
    command: list[str], source: Path, scratch: Path, *, split: bool
) -> tuple[float, dict, bytes]:
    work = scratch / "work"
    shutil.rmtree(work, ignore_errors=True)
    (work / "keep").mkdir(parents=True)
    began = time.perf_counter()
    if split:
        ran = run_nvcc(command, cwd=source.parent, timeout=300, deps=work / "deps.d")
        assert ran.returncode == 0 and ran.split, ran.output
        stages = ran.stages_ms
    else:
        whole = [*command, "-MD", f"-MF={work / 'deps.d'}"]
        subprocess.run(whole, cwd=source.parent, check=True, capture_output=True, timeout=300)
        stages = {}
    took = time.perf_counter() - began
    return took, stages, (work / "out.so").read_bytes()


def _summary(seconds: list[float], stages: list[dict]) -> dict:
    names = {name for run in stages for name in run}
    return {
        "median_s": round(statistics.median(seconds), 3),
        "min_s": round(min(seconds), 3),
        "max_s": round(max(seconds), 3),
        "stages_median_ms": {
            name: round(statistics.median(run.get(name, 0.0) for run in stages), 1)
            for name in sorted(names)
        },
    }


def measure(source: Path, builds: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        command = _harness_command(source, scratch)
        runs: dict[bool, list[tuple[float, dict, bytes]]] = {False: [], True: []}
        for _ in range(builds):
            for split in (False, True):
                runs[split].append(_once(command, source, scratch, split=split))
    whole, split = runs[False], runs[True]
    return {
        "command": " ".join(command),
        "builds_each_way": builds,
        "nvcc_whole": _summary([r[0] for r in whole], [r[1] for r in whole]),
        "steps_split": _summary([r[0] for r in split], [r[1] for r in split]),
        "identical_artifacts": all(s[2] == w[2] for s, w in zip(split, whole, strict=True)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", nargs="+", default=["relu", "softmax", "row_sum", "matmul"])
    parser.add_argument("--builds", type=int, default=10)
    args = parser.parse_args()
    results = {}
    for name in args.examples:
        results[name] = measure(EXAMPLES / f"{name}.cu", args.builds)
        whole, split = results[name]["nvcc_whole"], results[name]["steps_split"]
        print(
            f"{name}: nvcc {whole['median_s']:.3f} s, split {split['median_s']:.3f} s "
            f"(identical: {results[name]['identical_artifacts']})",
            flush=True,
        )
    path = write_result("build-steps", {"examples": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
