"""The in-process CUPTI counters against ncu's quick profile, on a GPU, for the plain examples.

    . bench/device_setup.sh > /tmp/setup.log 2>&1; python3 -m bench.counters_probe
        [--examples relu softmax matmul row_sum] [--replay kernel user] [--runs 2] [--no-ncu]
        [--variants default toolkit-cupti]

Made to diagnose a first run on a new machine, so it says everything and stops at nothing: the
environment and CUPTI copies, the counter library's build, then per example ncu through run_once
and the in-process profile in a child per CUPTI variant (a CUPTI crash kills the child only),
compared metric by metric, with each phase's wall time. Writes bench/results/counters-<gpu>.json."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import msgspec

from bench.common import REPO, write_result
from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.counter_metrics import COUNTER_METRICS, LAUNCH_METRICS
from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.check import cupti
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import Settings

EXAMPLES = ["relu", "softmax", "matmul", "row_sum"]
VARIANTS = ["default", "toolkit-cupti"]
SOL = [m.DURATION, m.SM_PCT, m.MEMORY_PCT, m.DRAM_PCT, m.L1_PCT, m.L2_PCT]
CHILD_TIMEOUT_S = 200  # two children and ncu must fit the device's 10 minutes


_LOG: list[str] = []  # everything printed, the children's lines included: copied to $OUT


def say(text: str = "") -> None:
    print(text, flush=True)
    _LOG.append(text)


def section(title: str) -> None:
    say(f"\n===== {title} " + "=" * max(0, 72 - len(title)))


def run_text(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({' '.join(command)}: {exc})"
    return (done.stdout + done.stderr).strip()


def failure_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


# --- 1. environment --------------------------------------------------------------------------


def environment(settings: Settings) -> dict:
    section("environment")
    nvcc = shutil.which(settings.nvcc)
    ncu = shutil.which(settings.ncu_path)
    info: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "nvidia_smi": run_text(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,compute_cap",
                "--format=csv,noheader",
            ]
        ),
        "nvcc": nvcc,
        "nvcc_version": run_text([nvcc, "--version"]).splitlines()[-1] if nvcc else None,
        "ncu": ncu,
        "ncu_version": run_text([ncu, "--version"]).splitlines()[-1] if ncu else None,
        "env": {
            key: os.environ.get(key)
            for key in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_MODULE_LOADING", "PATH")
        },
    }
    try:
        params = Path("/proc/driver/nvidia/params").read_text()
        info["profiling_admin_only"] = next(
            (line for line in params.splitlines() if "RmProfilingAdminOnly" in line), None
        )
    except OSError as exc:
        info["profiling_admin_only"] = f"unreadable: {exc}"
    toolkit = cupti.find_cupti(nvcc) if nvcc else None
    info["toolkit"] = msgspec.to_builtins(toolkit) if toolkit else None
    if toolkit is not None:
        lib = Path(toolkit.lib_dir)
        info["toolkit_cupti_files"] = sorted(
            p.name for p in lib.iterdir() if p.name.startswith(("libcupti", "libnvperf"))
        )
    info["torch_cupti_files"] = _torch_cupti_files()
    for key, value in info.items():
        say(f"{key:22} {json.dumps(value) if isinstance(value, dict | list) else value}")
    return info


def _torch_cupti_files() -> list[str]:
    """The libcupti copies of the installed Python packages (torch's nvidia wheels)."""
    import importlib.util

    found = []
    for package in ("nvidia", "torch"):
        spec = importlib.util.find_spec(package)
        for folder in spec.submodule_search_locations if spec else []:
            found += [str(p) for p in Path(folder).rglob("libcupti.so*")]
            found += [str(p) for p in Path(folder).rglob("libnvperf_host.so*")]
    return sorted(found)


# --- 2. the library ----------------------------------------------------------------------------


def library(settings: Settings) -> dict:
    section("counter library")
    out: dict = {}
    began = time.perf_counter()
    built, toolkit = cupti.build_library(settings)
    out["build_s"] = round(time.perf_counter() - began, 3)
    out["build"] = {"ok": built.ok, "cached": built.cached, "artifact": built.artifact}
    say(f"build: ok={built.ok} cached={built.cached} {out['build_s']} s -> {built.artifact}")
    if not built.ok:
        error = built.error
        out["build"]["error"] = msgspec.to_builtins(error) if error else None
        say(f"BUILD FAILED: {error.kind if error else '?'}: {error.message if error else ''}")
        say(error.log if error else "")
        say(f"command: {' '.join(built.command)}")
        return out
    began = time.perf_counter()
    again, _ = cupti.build_library(settings)
    out["cache_lookup_s"] = round(time.perf_counter() - began, 3)
    say(f"cache lookup: cached={again.cached} {out['cache_lookup_s']} s")
    say(f"libraries mapped before loading: {cupti.library_files()}")
    began = time.perf_counter()
    try:
        loaded = cupti.load_library(built.artifact, toolkit)
        out["load_s"] = round(time.perf_counter() - began, 3)
        out["info"] = msgspec.to_builtins(loaded.info())
        say(f"load: {out['load_s']} s; {out['info']}")
        say(f"libraries mapped after loading: {cupti.library_files()}")
        for chip in ("GH100", "GB100", "GA100"):
            plan = loaded.check_metrics(chip, COUNTER_METRICS)
            out[f"host_check_{chip}"] = msgspec.to_builtins(plan)
            missing = [item.metric for item in plan.unsupported]
            say(
                f"host-only check {chip}: {len(plan.supported)} supported, {plan.passes} passes, "
                f"unsupported: {missing or 'none'}"
            )
    except (OSError, cupti.CuptiFailure) as exc:
        out["error"] = failure_text(exc)
        say(f"LOAD/CHECK FAILED:\n{out['error']}")
    return out


# --- 3. ncu -------------------------------------------------------------------------------------


def prepare_examples(names: list[str], work: Path, settings: Settings) -> dict[str, dict]:
    """Each example copied into `work` and built (the children find the builds in the cache)."""
    out = {}
    for name in names:
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        for suffix in (".cu", ".py"):
            shutil.copy(REPO / "examples" / f"{name}{suffix}", folder / f"{name}{suffix}")
        target = resolve_target(folder / f"{name}.cu", settings)
        began = time.perf_counter()
        built = (
            build(build_spec(target, settings), settings) if isinstance(target, Target) else None
        )
        entry = {
            "source": str(folder / f"{name}.cu"),
            "build_s": round(time.perf_counter() - began, 3),
        }
        if built is None or not built.ok:
            entry["error"] = f"{target}" if built is None else msgspec.to_builtins(built.error)
        else:
            entry["resources"] = [
                {"name": r.name, "registers": r.registers, "shared": r.shared_bytes}
                for r in built.resources
            ]
        say(f"{name}: build {entry['build_s']} s {entry.get('error') or entry['resources']}")
        out[name] = entry
    return out


def ncu_quick(name: str, source: str, settings: Settings) -> dict:
    import torch

    from kernelblaster.harness.analysis.classify import classify_report
    from kernelblaster.harness.profile.profile import profile_target

    target = resolve_target(Path(source), settings)
    built = build(build_spec(target, settings), settings)
    major, minor = torch.cuda.get_device_capability()
    began = time.perf_counter()
    report, error = profile_target(
        target,
        built,
        msgspec.structs.replace(settings, native_profile_driver=False),
        depth="quick",
        arch=f"sm_{major}{minor}",
    )
    wall = round(time.perf_counter() - began, 3)
    if error is not None:
        say(f"{name}: ncu FAILED after {wall} s: {error.kind}: {error.message}\n{error.log}")
        return {"wall_s": wall, "error": msgspec.to_builtins(error)}
    states = [msgspec.to_builtins(state) for state in classify_report(report)]
    for state in states:
        say(f"{name}: ncu {wall} s  {state['kernel']}: {state['state']} | {state['summary']}")
    return {"wall_s": wall, "report": msgspec.to_builtins(report), "states": states}


# --- the child: in-process profiles -------------------------------------------------------------


def child(args) -> int:
    """One CUPTI variant's in-process profiles of every example, in this (fresh) process;
    everything is written to `args.out` after every step, so a crash leaves what came before."""
    faulthandler.enable()
    settings = Settings(cache_dir=args.cache)
    results: dict = {"variant": args.child, "steps": []}

    def save() -> None:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))

    if args.child == "toolkit-cupti":
        toolkit = cupti.find_cupti(shutil.which(settings.nvcc) or "nvcc")
        results["preloaded"] = cupti.preload_toolkit_cupti(toolkit) if toolkit else None
        say(f"[{args.child}] preloaded before torch: {results['preloaded']}")
    save()
    began = time.perf_counter()
    import torch

    from kernelblaster.harness.analysis.classify import classify_report
    from kernelblaster.harness.profile.counters import collect_counters

    try:
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the context, as a warm worker has it
    except (RuntimeError, AssertionError) as exc:
        results["exception"] = failure_text(exc)
        say(f"[{args.child}] no CUDA in torch:\n{results['exception']}")
        save()
        return 1
    results["torch_start_s"] = round(time.perf_counter() - began, 3)
    results["libraries_after_torch"] = cupti.library_files()
    say(
        f"[{args.child}] torch {torch.__version__} ready in {results['torch_start_s']} s; "
        f"libraries: {results['libraries_after_torch']}"
    )
    save()
    plan_printed = False
    for name, source in zip(args.examples, args.sources, strict=True):
        target = resolve_target(Path(source), settings)
        built = build(build_spec(target, settings), settings)
        for replay in args.replay:
            for run_index in range(args.runs):
                step = {"example": name, "replay": replay, "run": run_index}
                results["steps"].append(step)
                results["last_step"] = f"{name} {replay} run {run_index}"
                save()
                label = f"[{args.child}] {name} {replay} replay, run {run_index + 1}"
                try:
                    run = collect_counters(target, built, settings, replay=replay)
                except Exception as exc:  # noqa: BLE001 - the probe prints every failure and goes on
                    step["exception"] = failure_text(exc)
                    say(f"{label}: EXCEPTION\n{step['exception']}")
                    save()
                    continue
                step["run_record"] = msgspec.to_builtins(run)
                step["phase_seconds"] = {k: round(v, 4) for k, v in run.phase_seconds.items()}
                say(f"{label}: phases {step['phase_seconds']}")
                if run.library is not None and run_index == 0:
                    say(f"  CUPTI: {msgspec.to_builtins(run.library)}; files {run.library_files}")
                    if run.library.older_than_headers:
                        say("  WARNING: the libcupti running it is older than its headers")
                if run.prepared is not None and not plan_printed:
                    plan_printed = True
                    prepared = run.prepared
                    say(
                        f"  chip {prepared.chip} ({prepared.arch}, {prepared.sm_count} SMs), "
                        f"device support: {prepared.device_support}; {prepared.passes} passes"
                    )
                    say(f"  supported ({len(prepared.supported)}): {prepared.supported}")
                    say(f"  unsupported: {msgspec.to_builtins(prepared.unsupported)}")
                if run.begun is not None and run.begun.launch_records_error:
                    say(f"  LAUNCHES NOT RECORDED: {run.begun.launch_records_error}")
                if run.session is not None:
                    say(
                        f"  {len(run.session.ranges)} ranges "
                        f"({[r.name for r in run.session.ranges]}), "
                        f"{run.session.dropped_ranges} dropped, launches:"
                    )
                    for launch in run.session.launches:
                        say(f"    {msgspec.to_builtins(launch)}")
                if run.failure is not None:
                    say(f"  FAILED CALL: {msgspec.to_builtins(run.failure)}")
                if run.error is not None:
                    say(f"  ERROR {run.error.kind}: {run.error.message}\n  fix: {run.error.fix}")
                    if run.error.log:
                        say(f"  log: {run.error.log}")
                if run.report is not None:
                    step["states"] = [
                        msgspec.to_builtins(state) for state in classify_report(run.report)
                    ]
                    for state in step["states"]:
                        say(f"  {state['kernel']}: {state['state']} | {state['summary']}")
                save()
    results["done"] = True
    save()
    return 0


def run_child(variant: str, args, sources: list[str], work: Path) -> dict:
    out = work / f"child-{variant}.json"
    command = [
        sys.executable,
        "-m",
        "bench.counters_probe",
        "--child",
        variant,
        "--out",
        str(out),
        "--cache",
        str(work / "cache"),
        "--runs",
        str(args.runs),
        "--examples",
        *args.examples,
        "--sources",
        *sources,
        "--replay",
        *args.replay,
    ]
    section(f"in process: {variant}")
    began = time.perf_counter()
    child_process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # a child that hangs (in CUPTI, say) is killed: the probe must end within the device's time
    watchdog = threading.Timer(CHILD_TIMEOUT_S, child_process.kill)
    watchdog.start()
    for line in child_process.stdout:
        say(line.rstrip("\n"))
    status = child_process.wait()
    timed_out = not watchdog.is_alive()
    watchdog.cancel()
    if timed_out:
        status = f"killed after {CHILD_TIMEOUT_S} s"
    wall = round(time.perf_counter() - began, 3)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results["exit"] = status
    results["wall_s"] = wall
    if status != 0:
        died = (
            f"killed by {signal.Signals(-status).name}"
            if isinstance(status, int) and status < 0
            else f"exit {status}"
        )
        say(f"[{variant}] CHILD ENDED BADLY ({died}) during: {results.get('last_step')}")
    return results


# --- 4. side by side ----------------------------------------------------------------------------


def _value(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _differs(ours: float | None, theirs: float | None, name: str) -> bool:
    if ours is None or theirs is None:
        return ours is not theirs
    if "pct" in name or name.endswith(".pct"):
        return abs(ours - theirs) > 10.0
    return abs(ours - theirs) > 0.25 * max(abs(theirs), 1e-9)


def compare(name: str, ncu: dict, children: dict[str, dict]) -> dict:
    """Per kernel launch: every metric of ncu and of the last run of each variant and replay."""
    columns: dict[str, dict] = {}
    for variant, results in children.items():
        for step in results.get("steps", []):
            record = step.get("run_record") or {}
            if step["example"] == name and record.get("report"):
                columns[f"{variant}/{step['replay']}"] = record["report"]  # the last run wins
    ncu_report = ncu.get("report")
    section(f"{name}: side by side")
    if ncu_report is None or not columns:
        ncu_state = "ok" if ncu_report else "failed"
        say(f"nothing to compare: ncu {ncu_state}, in process: {list(columns)}")
        return {"compared": False}
    states = {"ncu": [s["state"] for s in ncu.get("states", [])]}
    for variant, results in children.items():
        for step in results.get("steps", []):
            if step["example"] == name and "states" in step:
                states[f"{variant}/{step['replay']}"] = [s["state"] for s in step["states"]]
    flagged = []
    for index, theirs in enumerate(ncu_report["kernels"]):
        say(f"-- {theirs['name']} (launch {index})")
        header = f"{'metric':78} {'ncu':>11}" + "".join(f" {c[:20]:>20}" for c in columns)
        say(header)
        names = SOL + [n for n in COUNTER_METRICS if n not in SOL] + list(LAUNCH_METRICS)
        for metric in names:
            row = f"{metric[:78]:78} {_value(theirs['metrics'].get(metric)):>11}"
            for column, report in columns.items():
                kernels = report["kernels"]
                ours = kernels[index]["metrics"].get(metric) if index < len(kernels) else None
                mark = "*" if _differs(ours, theirs["metrics"].get(metric), metric) else " "
                if mark == "*":
                    flagged.append(f"{column} {theirs['name']} {metric}")
                row += f" {_value(ours):>19}{mark}"
            say(row)
    say(f"states: {json.dumps(states)}")
    agree = {column: value == states["ncu"] for column, value in states.items() if column != "ncu"}
    say(f"same states as ncu: {agree}")
    return {"compared": True, "states": states, "same_states": agree, "flagged": flagged}


def _failures(results: dict) -> dict[str, int]:
    """Each distinct failure of a variant's runs (the failed call, or the exception's last
    line), with how many runs it ended."""
    counts: dict[str, int] = {}
    for step in results.get("steps", []):
        record = step.get("run_record") or {}
        failure, error = record.get("failure"), record.get("error")
        if failure:
            text = f"{failure['call']}: {failure['name']}: {failure['message'].strip()[:300]}"
        elif error:
            text = f"{error['kind']}: {error['message'][:300]}"
        elif "exception" in step:
            text = step["exception"].strip().splitlines()[-1][:300]
        else:
            continue
        counts[text] = counts.get(text, 0) + 1
    return counts


def diagnosis(results: dict) -> None:
    """The findings in a few lines, printed last (a device run may return only the output's
    tail): what ran, what failed and where, whether the states agree, what it costs."""
    section("diagnosis")
    environment, built = results.get("environment", {}), results.get("library", {})
    say(f"GPU: {environment.get('nvidia_smi')}; nvcc: {environment.get('nvcc_version')}")
    say(f"toolkit CUPTI: {environment.get('toolkit')}")
    say(f"torch's CUPTI files: {environment.get('torch_cupti_files')}")
    say(f"counter permission: {environment.get('profiling_admin_only')}")
    build_error = (built.get("build") or {}).get("error")
    say(
        f"library: build ok={built.get('build', {}).get('ok')} {built.get('build_s')} s, "
        f"cache lookup {built.get('cache_lookup_s')} s, load {built.get('load_s')} s; "
        f"{built.get('info')}" + (f"; BUILD ERROR {build_error}" if build_error else "")
    )
    for variant, child_results in results.get("in_process", {}).items():
        steps = child_results.get("steps", [])
        first = next((st.get("run_record") for st in steps if st.get("run_record")), None) or {}
        prepared = first.get("prepared") or {}
        say(
            f"[{variant}] exit {child_results.get('exit')} in {child_results.get('wall_s')} s, "
            f"last step {child_results.get('last_step')}; preloaded "
            f"{child_results.get('preloaded')}; CUPTI {first.get('library')}"
        )
        say(f"[{variant}] libraries: {first.get('library_files')}")
        if child_results.get("exception"):
            say(f"[{variant}] FAILED: {child_results['exception'].strip().splitlines()[-1]}")
        if prepared:
            unsupported = [item["metric"] for item in prepared.get("unsupported", [])]
            say(
                f"[{variant}] chip {prepared.get('chip')}, {prepared.get('passes')} passes, "
                f"{len(prepared.get('supported', []))} metrics, unsupported {unsupported}; "
                f"device: {prepared.get('device_support')}"
            )
        begun = first.get("begun") or {}
        if begun.get("launch_records_error"):
            say(f"[{variant}] LAUNCHES NOT RECORDED: {begun['launch_records_error']}")
        for text, count in _failures(child_results).items():
            say(f"[{variant}] FAILED {count}x: {text}")
    say("")
    for name, entry in results.get("examples", {}).items():
        ncu = entry.get("ncu", {})
        ncu_states = [state["state"] for state in ncu.get("states", [])] or "no report"
        say(f"{name}: ncu (run_once) {_value(ncu.get('wall_s'))} s, states {ncu_states}")
        if ncu.get("error"):
            say(f"  ncu FAILED: {ncu['error']['kind']}: {ncu['error']['message'][:400]}")
        elif ncu.get("exception"):
            say(f"  ncu FAILED: {ncu['exception'].strip().splitlines()[-1]}")
        for variant, child_results in results.get("in_process", {}).items():
            for replay in ("kernel", "user"):
                runs = [
                    st
                    for st in child_results.get("steps", [])
                    if st["example"] == name and st["replay"] == replay
                ]
                if not runs:
                    continue
                totals = " -> ".join(
                    _value(st.get("phase_seconds", {}).get("total")) for st in runs
                )
                last = runs[-1]
                states = [st["state"] for st in last.get("states", [])] or "no report"
                phases = {k: round(v, 3) for k, v in last.get("phase_seconds", {}).items()}
                say(f"  {variant}/{replay}: total {totals} s; states {states}; last run {phases}")
        comparison = entry.get("comparison", {})
        flagged = comparison.get("flagged", [])
        say(
            f"  same states as ncu: {comparison.get('same_states')}; {len(flagged)} metric "
            f"differences beyond 10 points / 25%: {flagged[:8]}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", nargs="*", default=EXAMPLES)
    parser.add_argument(
        "--replay", nargs="*", default=["kernel", "user"], choices=["kernel", "user"]
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--variants", nargs="*", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--no-ncu", action="store_true")
    # a child run (internal)
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--out")
    parser.add_argument("--cache")
    parser.add_argument("--sources", nargs="*")
    args = parser.parse_args()
    if args.child:
        return child(args)
    faulthandler.enable()
    began = time.perf_counter()
    results: dict = {"examples": {}}
    with tempfile.TemporaryDirectory(prefix="counters-probe-") as scratch:
        work = Path(scratch)
        settings = Settings(cache_dir=str(work / "cache"))
        results["environment"] = environment(settings)
        results["library"] = library(settings)
        section("examples: build")
        examples = prepare_examples(args.examples, work, settings)
        results["examples"] = examples
        if not args.no_ncu:
            section("ncu quick through run_once")
            for name, entry in examples.items():
                if "error" in entry:
                    continue
                try:
                    entry["ncu"] = ncu_quick(name, entry["source"], settings)
                except Exception as exc:  # noqa: BLE001 - the probe prints every failure and goes on
                    entry["ncu"] = {"exception": failure_text(exc)}
                    say(f"{name}: ncu EXCEPTION\n{entry['ncu']['exception']}")
        built = [name for name, entry in examples.items() if "error" not in entry]
        sources = [examples[name]["source"] for name in built]
        args.examples = built
        children = {variant: run_child(variant, args, sources, work) for variant in args.variants}
        results["in_process"] = children
        for name in built:
            examples[name]["comparison"] = compare(name, examples[name].get("ncu", {}), children)
    results["probe_s"] = round(time.perf_counter() - began, 3)
    diagnosis(results)
    path = write_result("counters", results)
    say(f"\nwrote {path} ({results['probe_s']} s)")
    out = os.environ.get("OUT")
    if out:  # the device machine returns what is written there
        shutil.copy(path, Path(out) / path.name)
        (Path(out) / "counters-probe.log").write_text("\n".join(_LOG) + "\n")
        say(f"copied it and the whole log (counters-probe.log) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
