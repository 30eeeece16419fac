"""Token cost of the optimization loop, per step and per optimization, on a GPU.

    python -m bench.tokens        # every candidate is built, verified, timed, profiled

The real harness with the scripted endpoint replying real CUDA (bench/scripted/); it sends no
`usage`, so the client's estimate (characters / 4) counts what our prompts contain. Writes
bench/results/tokens-<gpu>.json and prints each step and the KB entries it updated."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench import openai_server
from bench.common import write_result
from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

REPO = Path(__file__).resolve().parents[1]
SCRIPTED = Path(__file__).resolve().parent / "scripted"
# example → (kernel, technique forced for the step, the rewrite the "LLM" returns)
CASES = {
    "softmax": ("softmax_rowthread", "coalesce_global_access", "softmax_block_per_row.cu"),
    "matmul": ("matmul_naive", "shared_memory_tiling", "matmul_smem_tiled.cu"),
}


def main() -> int:
    server_module = openai_server
    results = {}
    with tempfile.TemporaryDirectory() as scratch, server_module.OpenAITestServer() as server:
        kb_path = Path(scratch) / "kb.sqlite3"
        for name, (kernel, technique, rewrite) in CASES.items():
            work = Path(scratch) / name
            work.mkdir()
            for file in (REPO / "examples").glob(f"{name}.*"):
                shutil.copy(file, work / file.name)
            code = (SCRIPTED / rewrite).read_text()
            server.push(
                server_module.reply(f"```cuda\n{code}```", usage=None),
                server_module.reply(json.dumps({"ok": True, "reasons": []}), usage=None),
                server_module.reply(json.dumps({"analyses": []}), usage=None),
                server_module.reply(json.dumps({"updates": []}), usage=None),
            )
            client = LlmClient(
                LlmConfig(
                    base_url=server.base_url,
                    model="test-model",  # the model the scripted server serves
                    api_key_env="NO_KEY",
                    timeout_s=30,
                    max_retries=0,
                ),
                api_key="scripted",
            )
            source = work / f"{name}.cu"
            with KnowledgeBase.open(kb_path) as kb:
                request = OptimizeRequest(
                    source=str(source),
                    source_text=source.read_text(),
                    kernel=kernel,
                    technique=technique,
                    rollouts=1,
                    depth=1,
                    top_k=3,
                    settings=Settings(cache_dir=str(work / "cache")),
                )
                outcome = run_optimization(
                    OptimizeRun(
                        request=request,
                        client=client,
                        kb=kb,
                        on_progress=lambda i, n, msg, best: print(f"  [{i}/{n}] {msg}", flush=True),
                    )
                )
                entries = [
                    {
                        "state": e.state,
                        "technique": e.technique,
                        "attempts": e.attempts,
                        "successes": e.successes,
                        "predicted_speedup": round(e.predicted_speedup, 3),
                    }
                    for e in kb.entries(technique=technique)
                ]
            per_purpose = {
                purpose: {"prompt": u.prompt_tokens, "completion": u.completion_tokens}
                for purpose, u in client.usage_by_purpose().items()
            }
            results[name] = {
                "kernel": kernel,
                "technique": technique,
                "error": outcome.error,
                "improved": outcome.improved,
                "speedup": outcome.speedup,
                "speedup_vs_eager": outcome.speedup_vs_eager,
                "speedup_vs_compile": outcome.speedup_vs_compile,
                "steps": [
                    {
                        "technique": s.technique,
                        "state_before": s.state_before,
                        "state_after": s.state_after,
                        "predicted": round(s.predicted_speedup, 3),
                        "measured": s.measured_speedup,
                        "outcome": s.outcome,
                        "prompt_tokens": s.prompt_tokens,
                        "completion_tokens": s.completion_tokens,
                    }
                    for s in outcome.steps
                ],
                "tokens_by_purpose": per_purpose,
                "tokens_total": {
                    "prompt": outcome.prompt_tokens,
                    "completion": outcome.completion_tokens,
                },
                "kb_entries": entries,
            }
            print(json.dumps(results[name], indent=1), flush=True)
    path = write_result("tokens", {"estimated_tokens": True, "examples": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
