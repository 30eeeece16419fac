"""What one candidate and one problem cost, how LLM waits overlap GPU work, and how rollouts scale.

    python3 -m bench.optimize_throughput --part single    # one GPU: candidates, fixed, overlap
    python3 -m bench.optimize_throughput --part candidates --problems level1/19_ReLU  # a part
    python3 -m bench.optimize_throughput --part scaling   # 4 GPUs: the same rollouts on 1, 2, 4

The numbers bench/project_kernelbench.py projects KernelBench's time from, written to
bench/results/optimize-throughput-<gpu>.json (each part adds its keys). `--part single`: per
candidate cost besides the LLM (`per_candidate_overhead_p50_s`, from each step's PhaseTimes), a
problem's fixed cost (`per_problem_fixed_s`, with `fixed_parts`), and `llm_overlap_ratio`.
`--part scaling`: the same optimize run on 1, 2 and 4 GPUs, the endpoint answering after
--llm-delay (`rollouts_scaling`, `whole_run_scaling`); ncu's passes take turns over the host, so
each run gives their share (`ncu_share`) and `serial_bound`, the scaling if only they stayed
serial. Every candidate is a real edit against the scripted endpoint."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import msgspec

from bench import openai_server
from bench.common import REPO, RESULTS, device_name, slug
from bench.kernelbench_mechanics import ANSWERS, PROBLEMS, prepared_answers
from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.agents.loop.evaluation import evaluate
from kernelblaster.agents.loop.rollout_runners import runner_for
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.harness.check import cupti
from kernelblaster.harness.protocol.optimize_protocol import (
    OptimizeRequest,
    OptimizeResult,
    PhaseTimes,
)
from kernelblaster.harness.protocol.worker_client import keep_spare_workers
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

# Plain-CUDA pairs, level 1 and level 2 (the .fast.cu answers are plain CUDA launchers)
CANDIDATE_PROBLEMS = {
    "level1": ["19_ReLU", "23_Softmax"],
    "level2": ["12_Gemm_Multiply_LeakyReLU"],
}
GOALS = {
    "per_candidate_overhead_p50_s": "<= 8",
    "per_problem_fixed_s": "<= 20",
    "llm_overlap_ratio": "<= 1.5",
    "rollouts_scaling": {"2": ">= 1.8", "4": ">= 3.2"},
}
SOFTMAX_REWRITE = REPO / "bench" / "scripted" / "softmax_block_per_row.cu"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part",
        choices=["single", "candidates", "overlap", "scaling"],
        required=True,
        help="single = candidates + overlap (each fits a device call on its own)",
    )
    parser.add_argument(
        "--problems",
        help="candidates: level/name,... of CANDIDATE_PROBLEMS (default: all of them)",
    )
    parser.add_argument("--rollouts", type=int, help="candidates: 2; scaling: 4")
    parser.add_argument("--depth", type=int, help="candidates: 3; scaling: 4")
    parser.add_argument(
        "--llm-delay", type=float, help="seconds the endpoint waits: overlap 10, scaling 2"
    )
    parser.add_argument("--gpus", default="0,1,2,3", help="scaling: the GPUs of the widest run")
    parser.add_argument("--copy-to", type=Path, help="also copy the results file here")
    args = parser.parse_args()
    path = RESULTS / f"optimize-throughput-{slug(device_name())}.json"
    with tempfile.TemporaryDirectory(prefix="throughput-") as scratch_dir:
        scratch = Path(scratch_dir)
        if args.part in ("single", "candidates", "overlap"):
            parts = {}
            if args.part != "overlap":
                problems = _chosen_problems(args.problems)
                rollouts, depth = args.rollouts or 2, args.depth or 3
                parts |= _candidates(scratch / "kb", problems, rollouts, depth, args.copy_to)
            if args.part != "candidates":
                parts |= _overlap(scratch / "overlap", _or(args.llm_delay, 10.0))
        else:
            gpus = [int(g) for g in args.gpus.split(",")]
            rollouts, depth = args.rollouts or 4, args.depth or 4
            delay_s = _or(args.llm_delay, 2.0)
            parts = _scaling(scratch / "scaling", gpus, rollouts, depth, delay_s)
    _merge(path, parts)
    print(json.dumps({k: v for k, v in parts.items() if not isinstance(v, (dict, list))}))
    print(f"wrote {path}")
    if args.copy_to:
        args.copy_to.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, args.copy_to / path.name)
    return 0


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _merge(path: Path, parts: dict) -> None:
    """Add `parts` to the results file of this GPU model, keeping what other parts wrote."""
    current = json.loads(path.read_text()) if path.is_file() else {}
    current.update({"device": device_name(), "goals": GOALS, **parts})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")


# --- candidates and fixed cost: the KernelBench runner ----------------------------------------


def _kernelbench_responder(server):
    """Each agent's reply at once: the lowering agent the faster kernel of the launcher in its
    prompt, with one constant no other reply has (so that each reply is a new candidate)."""
    _, faster = prepared_answers(ANSWERS)
    numbers = itertools.count(1)

    def lowering(request):
        launcher = re.search(r'extern\s+"C"\s+\w+\s+(\w+)\s*\(', request.prompt_text)
        code = faster.get(launcher.group(1)) if launcher else None
        if code is None:
            return server.HttpError(400, "no prepared answer for this prompt")
        edit = f"extern const int kScriptedRewrite{(n := next(numbers))} = {n};\n"
        return server.reply(f"```cuda\n{code}{edit}```", usage=None)

    return server.reply_by_agent({"lowering": lowering, **_quiet_agents(server, 0.0)})


def _quiet_agents(server, delay_s: float) -> dict:
    """The agents besides lowering, answering after `delay_s`: the verifier "ok", the policy
    update and the state extractor with nothing to change."""
    return {
        "soft_verify": server.reply(json.dumps({"ok": True, "reasons": []}), delay_s=delay_s),
        "perf_gap": server.reply(json.dumps({"analyses": []}), delay_s=delay_s),
        "parameter_update": server.reply(json.dumps({"updates": []}), delay_s=delay_s),
        "state_extractor": server.reply(
            json.dumps({"state": "scripted", "confidence": 0.0, "rationale": "scripted"}),
            delay_s=delay_s,
        ),
    }


def _chosen_problems(spec: str | None) -> dict[str, list[str]]:
    """CANDIDATE_PROBLEMS, or the `level/name` ones of them that `spec` names."""
    if not spec:
        return CANDIDATE_PROBLEMS
    chosen: dict[str, list[str]] = {}
    for item in spec.split(","):
        level, _, name = item.partition("/")
        if name not in CANDIDATE_PROBLEMS.get(level, []):
            raise SystemExit(f"--problems: {item!r} is not one of {CANDIDATE_PROBLEMS}")
        chosen.setdefault(level, []).append(name)
    return chosen


def _candidates(
    work: Path, chosen: dict[str, list[str]], rollouts: int, depth: int, copy_to: Path | None
) -> dict:
    server_module = openai_server
    start = work / "start"
    start.mkdir(parents=True)
    for answer in ANSWERS.glob("*.init.cu"):
        shutil.copy(answer, start / answer.name.replace(".init.cu", ".cu"))
    results = work / "results"
    problems: list[dict] = []
    one_time = _one_time_setup(work / "cache")
    with server_module.OpenAITestServer(responder=_kernelbench_responder(server_module)) as server:
        env = {
            **os.environ,
            "KERNELBLASTER_LLM_BASE_URL": server.base_url,
            "KERNELBLASTER_LLM_MODEL": "test-model",
            "KERNELBLASTER_CACHE_DIR": str(work / "cache"),  # cold: every baseline measured
        }
        for level, names in chosen.items():
            problems += _bench_kernelbench(env, work, level, names, rollouts, depth, results, start)
            if copy_to:  # the runner's own record, kept even if a later level runs out of time
                copy_to.mkdir(parents=True, exist_ok=True)
                for path in results.glob(f"kernelbench-*-{level}.json"):
                    shutil.copy(path, copy_to / path.name)
    candidates, fixed = [], []
    for problem in problems:
        steps = []
        for phases, outcome, speedup in zip(
            problem["step_phases"], problem["step_outcomes"], problem["step_speedups"], strict=True
        ):
            step = _phases_of(phases)
            count = sum(span.kind == "gpu" for span in step.spans)
            candidates += [_candidate(problem["level"], step, count)] * count
            steps.append({"outcome": outcome, "speedup": speedup, "ncu": step.full_profile > 0})
        run = _phases_of(problem["optimize_phases"] or {})
        fixed.append(
            {
                "problem": problem["problem"],
                "level": problem["level"],
                "status": problem["status"],
                "steps": steps,
                "wall_s": problem["wall_s"],
                "rollouts_wall_s": problem["rollouts_wall_s"],
                # the endpoint answers at once: the policy update's LLM time is ~0
                "fixed_s": round(problem["wall_s"] - problem["rollouts_wall_s"], 3),
                "fixed_parts": _fixed_parts(problem, run),
            }
        )
    by_level = {
        level: {
            "per_candidate_overhead_p50_s": _p50(
                [c["overhead_s"] for c in candidates if c["level"] == level]
            ),
            "per_problem_fixed_s": _p50([f["fixed_s"] for f in fixed if f["level"] == level]),
        }
        for level in chosen
    }
    ncu_parts = sorted({name for c in candidates for name in c["parts"] if name[:4] == "ncu_"})
    return {
        "per_candidate_overhead_p50_s": _p50([c["overhead_s"] for c in candidates]),
        "per_problem_fixed_s": _p50([f["fixed_s"] for f in fixed]),
        "one_time_s": one_time,
        "by_level": by_level,
        "candidates": {
            "problems": chosen,
            "rollouts": rollouts,
            "depth": depth,
            "count": len(candidates),
            "overhead_s": sorted(c["overhead_s"] for c in candidates),
            "with_ncu": sum(c["full_profile_s"] > 0 for c in candidates),
            "overhead_p50_with_ncu_s": _p50(
                [c["overhead_s"] for c in candidates if c["full_profile_s"] > 0]
            ),
            "overhead_p50_without_ncu_s": _p50(
                [c["overhead_s"] for c in candidates if c["full_profile_s"] == 0]
            ),
            "phase_p50_s": {
                name: _p50([c["phases"][name] for c in candidates]) for name in _PHASES
            },
            # over the candidates that got ncu's pass
            "ncu_phase_p50_s": {
                name: _p50([c["parts"].get(name, 0.0) for c in candidates if c["full_profile_s"]])
                for name in ncu_parts
            },
        },
        "problems": fixed,
    }


_PHASES = (
    "evaluation",
    "build",
    "reference",
    "verify",
    "timing",
    "quick_profile",
    "full_profile",
    "baselines",
    "kb_write",
)


def _candidate(level: str, step: PhaseTimes, count: int) -> dict:
    """One of the `count` candidates a step checked, each taking an equal share of it."""
    share = {name: round(getattr(step, name) / count, 4) for name in _PHASES}
    return {
        "level": level,
        "overhead_s": round(share["evaluation"] + share["kb_write"], 4),
        "full_profile_s": share["full_profile"],
        "phases": share,
        "parts": {name: round(seconds / count, 4) for name, seconds in step.parts.items()},
    }


def _fixed_parts(problem: dict, run: PhaseTimes) -> dict:
    """Where a problem's time besides its rollouts went: the given kernel's check (the call's
    wall seconds, and its phases: the full profile, the baselines), the loop's own time besides
    its rollouts (its start; the sanitizer run of the best and the policy update, `run_phases`),
    and what is left: the runner's own."""
    first = _phases_of(problem["first_phases"] or {})
    first_s = first.evaluation
    optimize_own_s = problem["optimize_wall_s"] - problem["rollouts_wall_s"]
    return {
        "first_check_s": first_s,
        "first_check_phases": {k: v for k, v in _phase_seconds(first).items() if v},
        "first_check_parts": first.parts,
        "optimize_besides_rollouts_s": round(optimize_own_s, 3),
        "run_phases": {k: v for k, v in _phase_seconds(run).items() if v},
        "run_parts": run.parts,
        "runner_other_s": round(problem["wall_s"] - first_s - problem["optimize_wall_s"], 3),
        "baselines_apart": _baselines_apart(problem),
    }


def _baselines_apart(problem: dict) -> dict | None:
    """The baselines measured apart: their compilation (beside the checks, part of no other cost),
    their wait for the GPU, their turn on it (in rollouts_wall_s when it came between steps) and
    what the problem's end waited for them (in runner_other_s)."""
    if not problem.get("baselines_phases"):
        return None
    phases = _phases_of(problem["baselines_phases"])
    cpu = [s for s in phases.spans if s.kind == "cpu"]
    gpu = [s for s in phases.spans if s.kind == "gpu"]
    steps = [s for p in problem["step_phases"] for s in _phases_of(p).spans if s.kind == "gpu"]
    began, ended = (min(s.start for s in steps), max(s.end for s in steps)) if steps else (0, 0)
    return {
        "compile_s": round(sum(s.end - s.start for s in cpu), 3),
        "gpu_queue_s": phases.gpu_queue,
        "gpu_turn_s": phases.evaluation,
        "turn_between_steps": bool(gpu) and began <= gpu[0].start and gpu[0].end <= ended,
        "joined_wait_s": phases.parts.get("baselines_joined_wait"),
        "parts": phases.parts,
    }


def _one_time_setup(cache: Path) -> dict[str, float]:
    """What a machine does once for every later run, done here before the first problem (in the
    cache the runs use) so that no problem's time holds it: the CUPTI counter library's build."""
    began = time.monotonic()
    built, _ = cupti.build_library(Settings(cache_dir=str(cache)))
    if not built.ok:
        print(f"the counter library did not build: {built.error}", flush=True)
    return {"counter_library_build": round(time.monotonic() - began, 3)}


def _bench_kernelbench(env, work, level, names, rollouts, depth, results, start) -> list[dict]:
    command = [
        sys.executable, "-m", "kernelblaster", "bench", "kernelbench", str(PROBLEMS / level),
        "--only", ",".join(names), "--start", str(start), "--mechanics",
        "--rollouts", str(rollouts), "--depth", str(depth), "--seed", "1",
        "--results", str(results), "--work", str(work / "problems" / level),
        "--kb", str(work / "kb.sqlite3"), "--restart",
    ]  # fmt: skip
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, env=env, cwd=REPO, check=True)
    (path,) = results.glob(f"kernelbench-*-{level}.json")
    return [{**problem, "level": level} for problem in json.loads(path.read_text())["problems"]]


def _phases_of(data: dict) -> PhaseTimes:
    return msgspec.convert(data, PhaseTimes)


def _phase_seconds(phases: PhaseTimes) -> dict[str, float]:
    return {
        name: getattr(phases, name)
        for name in phases.__struct_fields__
        if name not in ("spans", "parts")
    }


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


# --- optimize runs: overlap and scaling --------------------------------------------------------


class _OptimizeBench:
    """`optimize` on a copy of examples/softmax.cu with spare workers, as the CLI runs it; the
    endpoint answers the lowering agent with a faster rewrite plus one unused constant."""

    def __init__(self, work: Path, delay_s: float):
        self.work, self.delay_s = work, delay_s
        work.mkdir(parents=True)
        for file in (REPO / "examples").glob("softmax.*"):
            shutil.copy(file, work / file.name)
        self.source = work / "softmax.cu"
        self.server_module = openai_server
        code = SOFTMAX_REWRITE.read_text()
        numbers = itertools.count(1)

        def lowering(_request):
            edit = f"extern const int kScriptedRewrite{(n := next(numbers))} = {n};\n"
            return self.server_module.reply(
                f"```cuda\n{code}{edit}```", usage=None, delay_s=delay_s
            )

        agents = {"lowering": lowering, **_quiet_agents(self.server_module, delay_s)}
        self.responder = self.server_module.reply_by_agent(agents)

    def run(self, name: str, gpus: list[int], rollouts: int, depth: int) -> OptimizeResult:
        settings = Settings(cache_dir=str(self.work / "cache"), gpu_index=gpus)
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(
                self.server_module.OpenAITestServer(responder=self.responder)
            )
            kb = stack.enter_context(KnowledgeBase.open(self.work / f"kb-{name}.sqlite3"))
            stack.enter_context(keep_spare_workers())
            client = LlmClient(
                LlmConfig(
                    base_url=server.base_url,
                    model="test-model",
                    api_key_env="NO_KEY",
                    timeout_s=self.delay_s + 60,
                    max_retries=0,
                ),
                api_key="scripted",
            )
            request = OptimizeRequest(
                source=str(self.source),
                source_text=self.source.read_text(),
                kernel="softmax_rowthread",
                rollouts=rollouts,
                depth=depth,
                seed=1,
                settings=settings,
            )
            began = time.monotonic()
            result = run_optimization(
                OptimizeRun(
                    request=request,
                    client=client,
                    kb=kb,
                    evaluate=evaluate,
                    run_rollouts=runner_for(settings),
                    on_progress=lambda s, t, m, _b: print(f"  [{name} {s}/{t}] {m}", flush=True),
                )
            )
            print(f"{name}: {time.monotonic() - began:.1f} s, error {result.error}", flush=True)
        return result


def _gpu_seconds(result: OptimizeResult) -> float:
    spans = [s for step in result.steps for s in step.phases.spans] + result.phases.spans
    return sum(s.end - s.start for s in spans if s.kind == "gpu")


def _summary(result: OptimizeResult) -> dict:
    ncu_s = sum(step.phases.full_profile for step in result.steps)
    by_rollout: dict[int, float] = {}
    for step in result.steps:
        by_rollout[step.rollout] = by_rollout.get(step.rollout, 0.0) + step.phases.llm_s
    return {
        "wall_s": result.wall_s,
        "rollouts_wall_s": result.rollouts_wall_s,
        "steps": len(result.steps),
        "outcomes": dict(Counter(step.outcome for step in result.steps)),
        "error": result.error,
        "gpu_evaluation_s": round(_gpu_seconds(result), 3),
        "llm_s_by_rollout": {str(r): round(s, 3) for r, s in sorted(by_rollout.items())},
        "policy_update_s": result.phases.policy_update,
        "ncu_passes": sum(s.phases.full_profile > 0 for s in result.steps),
        # ncu's passes in the rollouts, which take turns over the host (the profiling lock)
        "ncu_s": round(ncu_s, 3),
        "ncu_share": round(ncu_s / result.rollouts_wall_s, 3) if result.rollouts_wall_s else None,
        "run_phases": {k: v for k, v in _phase_seconds(result.phases).items() if v},
    }


def _overlap(work: Path, delay_s: float) -> dict:
    bench = _OptimizeBench(work, delay_s)
    result = bench.run("overlap", [0], rollouts=4, depth=3)
    summary = _summary(result)
    longest_llm = max(summary["llm_s_by_rollout"].values(), default=0.0)
    bound = max(summary["gpu_evaluation_s"], longest_llm)
    return {
        "llm_overlap_ratio": round(result.wall_s / bound, 3) if bound else None,
        "overlap": {"llm_delay_s": delay_s, "rollouts": 4, "depth": 3, **summary},
    }


def _scaling(work: Path, gpus: list[int], rollouts: int, depth: int, delay_s: float) -> dict:
    bench = _OptimizeBench(work, delay_s)
    # The nvcc builds, the counter library, each GPU's baselines: what every timed run shares
    bench.run("warmup", gpus, rollouts=len(gpus), depth=1)
    runs = {}
    for count in (1, 2, 4):
        if count <= len(gpus):
            runs[str(count)] = _summary(bench.run(f"{count} GPU", gpus[:count], rollouts, depth))
    workload = {"rollouts": rollouts, "depth": depth, "llm_delay_s": delay_s, "gpus": gpus}
    return scaling_figures(runs, workload)


def scaling_figures(runs: dict[str, dict], workload: dict) -> dict:
    """The scaling over GPUs from each GPU count's run summary ("1" always there)."""
    one = runs["1"]
    share = one["ncu_share"]
    return {
        "rollouts_scaling": {
            n: round(one["rollouts_wall_s"] / run["rollouts_wall_s"], 3)
            for n, run in runs.items()
            if n != "1"
        },
        "whole_run_scaling": {
            n: round(one["wall_s"] / run["wall_s"], 3) for n, run in runs.items() if n != "1"
        },
        # what the 1-GPU run allows if only ncu's passes stay serial (Amdahl)
        "serial_bound": (
            {str(n): round(1 / (share + (1 - share) / n), 3) for n in (2, 4)}
            if share is not None
            else {}
        ),
        "scaling": {**workload, "runs": runs},
    }


if __name__ == "__main__":
    sys.exit(main())
