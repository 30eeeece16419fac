"""Nsight Compute on a plain target through the native driver vs through run_once, on a GPU.

    python3 -m bench.profile_driver [--examples relu softmax] [--repeats 5]

Per example, alternating: ncu's wall time (`ncu_s`), the program without ncu, and
`profile_target` as a save calls it (`profile_s`; `first_profile_s` compiles the driver). Both
reports' kernels, launches and states are recorded, and whether they agree. Writes
bench/results/profile-driver-<gpu>.json."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import torch

from bench.common import REPO, write_result
from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.native.driver_run import driver_command
from kernelblaster.harness.profile.ncu import run_ncu
from kernelblaster.harness.profile.profile import profile_target
from kernelblaster.harness.protocol.records import ProfileReport
from kernelblaster.harness.target.run_once import RunOnceSpec, program, write_spec
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings

PROGRAMS = ("native_driver", "run_once")


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _summary(report: ProfileReport) -> dict:
    """What must agree between the two programs: the kernels, their launches, their states."""
    return {
        "kernels": [kernel.name for kernel in report.kernels],
        "launch": [{"grid": k.launch.grid, "block": k.launch.block} for k in report.kernels],
        "states": [
            {"kernel": s.kernel, "state": s.state, "summary": s.summary}
            for s in classify_report(report)
        ],
    }


def measure(name: str, work: Path, repeats: int) -> dict:
    for suffix in (".cu", ".py"):
        shutil.copy(REPO / "examples" / f"{name}{suffix}", work / f"{name}{suffix}")
    source = work / f"{name}.cu"
    settings = Settings(cache_dir=str(work / "cache"))
    target = resolve_target(source, settings)
    assert isinstance(target, Target), target
    built = build(build_spec(target, settings), settings)
    assert built.ok, built.error
    kernels = kernel_names(source)

    def profile(native: bool) -> ProfileReport:
        report, error = profile_target(
            target,
            built,
            msgspec.structs.replace(settings, native_profile_driver=native),
            depth="quick",
            arch=_arch(),
        )
        if error is not None:
            raise RuntimeError(f"{error.kind}: {error.message}\n{error.log}")
        return report

    began = time.perf_counter()
    first = profile(True)
    first_s = round(time.perf_counter() - began, 3)
    if first.program != "native_driver":
        raise RuntimeError(f"the driver was not used: {first.fallback_reason}")
    scratch = work / "commands"
    scratch.mkdir()
    native_command, reason = driver_command(target, built, settings, scratch)
    if native_command is None:
        raise RuntimeError(reason)
    commands = {
        "native_driver": native_command,
        "run_once": program(
            write_spec(RunOnceSpec(target=target, artifact=built.artifact), scratch)
        ),
    }
    times: dict[str, dict[str, list[float]]] = {
        key: {program_: [] for program_ in PROGRAMS}
        for key in ("ncu_s", "without_ncu_s", "profile_s")
    }
    reports: dict[str, ProfileReport] = {}
    for repeat in range(repeats):
        for program_ in PROGRAMS:
            command = commands[program_]
            began = time.perf_counter()
            _, error = run_ncu(
                command,
                kernels=kernels,
                depth="quick",
                report_path=scratch / f"bench-{repeat}",
                settings=settings,
                cwd=work,
                arch=_arch(),
            )
            times["ncu_s"][program_].append(round(time.perf_counter() - began, 3))
            if error is not None:
                raise RuntimeError(f"{program_}: {error.kind}: {error.message}\n{error.log}")
            began = time.perf_counter()
            done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300)
            times["without_ncu_s"][program_].append(round(time.perf_counter() - began, 3))
            if done.returncode != 0:
                raise RuntimeError(f"{program_} without ncu: {done.stderr[-2000:]}")
            began = time.perf_counter()
            reports[program_] = profile(program_ == "native_driver")
            times["profile_s"][program_].append(round(time.perf_counter() - began, 3))
    summaries = {program_: _summary(reports[program_]) for program_ in PROGRAMS}
    return {
        "first_profile_s": first_s,
        **{
            key: {
                program_: {"runs": runs, "p50": statistics.median(runs)}
                for program_, runs in by_program.items()
            }
            for key, by_program in times.items()
        },
        "reports": summaries,
        "same_kernels_and_states": summaries["native_driver"] == summaries["run_once"],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", nargs="*", default=["relu", "softmax"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.examples:
            work = Path(scratch) / name
            work.mkdir()
            results[name] = measure(name, work, args.repeats)
            entry = results[name]
            print(
                f"{name:8} ncu p50: driver {entry['ncu_s']['native_driver']['p50']:.2f} s, "
                f"run_once {entry['ncu_s']['run_once']['p50']:.2f} s; profile_target p50: "
                f"driver {entry['profile_s']['native_driver']['p50']:.2f} s, "
                f"run_once {entry['profile_s']['run_once']['p50']:.2f} s; "
                f"same states: {entry['same_kernels_and_states']}",
                flush=True,
            )
    path = write_result("profile-driver", {"depth": "quick", "examples": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
