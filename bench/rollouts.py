"""Wall time of `optimize` with its rollouts on one GPU, then on two, for the same rollouts.

    python3 -m bench.rollouts                          # needs 2 GPUs; ~8 min on an H200 pair
    python3 -m bench.rollouts --rollouts 8 --depth 3 --example softmax --gpus 0,1
    python3 -m bench.rollouts --fresh-workers   # a fresh worker per evaluation, to compare

The scripted endpoint answers at once with the same real rewrite plus one unused constant, so
every step is real harness work and the ratio is the harness's. The rollout phase is timed on its
own too, since the original's profile and the best's sanitizer run don't spread. Writes
bench/results/rollouts-<gpu>.json after each run: wall times, steps, per-GPU busy time, and the
1-GPU / N-GPU ratios."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench import openai_server
from bench.common import REPO, write_result
from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.agents.loop.evaluation import evaluate
from kernelblaster.agents.loop.rollout_runners import runner_for
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.harness.protocol.worker_client import keep_spare_workers
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

SCRIPTED = REPO / "bench" / "scripted"
CASES = {  # example -> (kernel, the rewrite the "LLM" returns)
    "softmax": ("softmax_rowthread", "softmax_block_per_row.cu"),
    "matmul": ("matmul_naive", "matmul_smem_tiled.cu"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", choices=sorted(CASES), default="softmax")
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--gpus", default="0,1", help="the GPUs of the parallel run")
    parser.add_argument(
        "--fresh-workers",
        action="store_true",
        help="start a worker for each evaluation instead of keeping spare workers",
    )
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    kernel, rewrite = CASES[args.example]
    server_module = openai_server
    code = (SCRIPTED / rewrite).read_text()
    replies = {
        "lowering": server_module.reply(f"```cuda\n{code}```", usage=None),
        "soft_verify": server_module.reply(json.dumps({"ok": True, "reasons": []})),
        "perf_gap": server_module.reply(json.dumps({"analyses": []})),
        "parameter_update": server_module.reply(json.dumps({"updates": []})),
    }
    payload: dict = {
        "example": args.example,
        "kernel": kernel,
        "rollouts": args.rollouts,
        "depth": args.depth,
        "gpus": gpus,
        "workers": "fresh per evaluation" if args.fresh_workers else "spare (prewarmed)",
        "goal": ">= 1.8x wall-time ratio for 2 GPUs",
        "runs": [],
    }
    by_agent = server_module.reply_by_agent(replies)
    numbers = itertools.count(1)

    def responder(request):
        scripted = by_agent(request)
        if scripted is not replies["lowering"]:
            return scripted
        edit = f"extern const int kScriptedRewrite{(n := next(numbers))} = {n};\n"
        return server_module.reply(f"```cuda\n{code}{edit}```", usage=None)

    with (
        tempfile.TemporaryDirectory() as scratch_dir,
        server_module.OpenAITestServer(responder=responder) as server,
    ):
        scratch = Path(scratch_dir)
        for file in (REPO / "examples").glob(f"{args.example}.*"):
            shutil.copy(file, scratch / file.name)
        source = scratch / f"{args.example}.cu"
        bench = _Bench(scratch, source, kernel, server.base_url, spares=not args.fresh_workers)
        kind = "rollouts-fresh-workers" if args.fresh_workers else "rollouts"
        print(f"warming up on GPUs {gpus}", flush=True)
        payload["warmup"] = last = bench.run("warmup", gpus, rollouts=len(gpus), depth=1)
        for name, on in (("1 GPU", gpus[:1]), (f"{len(gpus)} GPUs", gpus)):
            if last["error"] or not last["steps"]:
                print(f"stopped: the {last['name']} run failed", flush=True)
                return 1
            payload["runs"].append(last := bench.run(name, on, args.rollouts, args.depth))
            path = write_result(kind, payload)  # after each run: a timeout keeps the first
    one, many = payload["runs"]
    payload["same_steps"] = one["steps"] == many["steps"]
    payload["ratio_wall"] = one["wall_s"] / many["wall_s"]
    payload["ratio_rollout_phase"] = one["rollout_phase_s"] / many["rollout_phase_s"]
    path = write_result(kind, payload)
    print(json.dumps({k: payload[k] for k in ("same_steps", "ratio_wall", "ratio_rollout_phase")}))
    print(f"wrote {path}")
    return 0


class _Bench:
    def __init__(self, scratch: Path, source: Path, kernel: str, base_url: str, *, spares: bool):
        self.scratch, self.source, self.kernel = scratch, source, kernel
        self.spares = spares  # keep spare workers during each run, as `optimize` does
        self.cache = scratch / "cache"  # shared by every run: builds and baselines stay warm
        self.client = LlmClient(
            LlmConfig(
                base_url=base_url,
                model="test-model",  # the model the scripted server serves
                api_key_env="NO_KEY",
                timeout_s=60,
                max_retries=0,
            ),
            api_key="scripted",
        )

    def run(self, name: str, gpus: list[int], rollouts: int, depth: int) -> dict:
        settings = Settings(cache_dir=str(self.cache), gpu_index=gpus)
        evaluations: list[tuple[int, float, float]] = []  # (gpu, start, end)
        lock = threading.Lock()

        def timed_evaluate(source, text, kernel, on_gpu: Settings, **options):
            start = time.monotonic()
            result = evaluate(source, text, kernel, on_gpu, **options)
            with lock:
                evaluations.append((on_gpu.gpu, start, time.monotonic()))
            return result

        runner = runner_for(settings)
        phase: dict[str, float] = {}

        def timed_rollouts(plan, count, services):
            start = time.monotonic()
            results = runner(plan, count, services)
            phase["rollouts_s"] = time.monotonic() - start
            return results

        def progress(step: int, total: int, message: str, best: float | None) -> None:
            print(f"  [{name} {step}/{total}] {message}", flush=True)

        kb_path = self.scratch / f"kb-{name.replace(' ', '-')}.sqlite3"
        workers = keep_spare_workers() if self.spares else contextlib.nullcontext()
        with KnowledgeBase.open(kb_path) as kb, workers:
            start = time.monotonic()
            request = OptimizeRequest(
                source=str(self.source),
                source_text=self.source.read_text(),
                kernel=self.kernel,
                rollouts=rollouts,
                depth=depth,
                top_k=3,
                seed=1,
                settings=settings,
            )
            outcome = run_optimization(
                OptimizeRun(
                    request=request,
                    client=self.client,
                    kb=kb,
                    evaluate=timed_evaluate,
                    on_progress=progress,
                    run_rollouts=timed_rollouts,
                )
            )
            wall = time.monotonic() - start
        by_gpu = {gpu: [(s, e) for g, s, e in evaluations if g == gpu] for gpu in sorted(set(gpus))}
        record = {
            "name": name,
            "gpus": gpus,
            "wall_s": round(wall, 2),
            "rollout_phase_s": round(phase.get("rollouts_s", float("nan")), 2),
            "steps": len(outcome.steps),
            "outcomes": dict(Counter(step.outcome for step in outcome.steps)),
            "error": outcome.error,
            "improved": outcome.improved,
            "speedup": outcome.speedup,
            "evaluations_per_gpu": {gpu: len(spans) for gpu, spans in by_gpu.items()},
            "evaluation_s_per_gpu": {
                gpu: round(sum(e - s for s, e in spans), 2) for gpu, spans in by_gpu.items()
            },
            "both_gpus_busy_s": round(_overlap(list(by_gpu.values())), 2),
        }
        print(json.dumps(record), flush=True)
        return record


def _overlap(per_gpu: list[list[tuple[float, float]]]) -> float:
    """Seconds during which the first two GPUs were both evaluating."""
    if len(per_gpu) < 2:
        return 0.0
    return sum(
        max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in per_gpu[0] for s2, e2 in per_gpu[1]
    )


if __name__ == "__main__":
    sys.exit(main())
