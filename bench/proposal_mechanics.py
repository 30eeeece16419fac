"""A proposed technique end to end on a GPU, with no model: a mechanics run.

    python3 -m bench.proposal_mechanics [--copy-to "$OUT"]

`optimize` on a copy of examples/row_sum.cu against the scripted endpoint, which declines every
catalog technique, so the KB honestly has nothing left; it then proposes
`warp_row_streaming_reduce` and returns bench/scripted/row_sum_warp_streaming.cu, which the real
harness checks and records. It proves the trigger, prompt, validation, KB row and outcome; not
that a model proposes good techniques (the idea is ours). Writes
bench/results/proposal-mechanics-<gpu>.json; exits 1 unless the step verified and is in the KB."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import msgspec

from bench import openai_server
from bench.common import REPO, write_result
from kernelblaster.harness.protocol.optimize_protocol import OptimizeResult
from kernelblaster.kb.catalog import load_catalog
from kernelblaster.kb.proposals import proposal_views
from kernelblaster.kb.store import KnowledgeBase

PROPOSED = "warp_row_streaming_reduce"
REWRITE = REPO / "bench" / "scripted" / "row_sum_warp_streaming.cu"
EXAMPLE = REPO / "examples"
KERNEL = "row_sum_serial"
NOTE = (
    "Mechanics run: the scripted model declines every catalog technique (no code), so each is "
    "tried and recorded as an error on this source; then it proposes warp_row_streaming_reduce "
    "and answers its lowering with bench/scripted/row_sum_warp_streaming.cu, which the real "
    "harness builds, verifies, times and profiles. The numbers are those of a kernel we wrote, "
    "not of a model."
)
_FINDING_LINE = re.compile(r"^- ([a-z0-9_]+)", re.MULTILINE)
_WHY = re.compile(r"has no technique left to try: (.*?)\.\n", re.DOTALL)


def proposal_item(findings: list[str]) -> dict:
    """The scripted model's proposal, aimed at the kernel's findings the prompt listed."""
    preferred = [f for f in ("uncoalesced_global_access", "small_grid") if f in findings]
    return {
        "id": PROPOSED,
        "title": "Warp-per-row reduction with evict-first streaming loads",
        "description": "Give each row to one warp so that its lanes read consecutive elements, "
        "load them with evict-first (streaming) cache hints because every element is read "
        "exactly once, and combine the lanes' partial sums with warp shuffles.",
        "how_to_apply": "Map one warp to each row instead of one thread; let lane l sum the "
        "elements l, l+32, l+64 and so on with the cache-streaming load intrinsic (__ldcs); "
        "reduce the 32 partial sums with __shfl_down_sync; lane 0 writes the row's result. "
        "Launch rows times 32 threads.",
        "addresses_findings": preferred or findings[:1] or ["uncoalesced_global_access"],
        "prior_speedup": 4.0,
        "prior_reason": "a warp reads a row in 128-byte transactions instead of one sector per "
        "thread, and 32x more threads hide the latency",
    }


class Script:
    """The scripted model: answers each agent by its prompt (openai_server.reply_by_agent) and
    keeps what it was asked that the result needs."""

    def __init__(self, server: ModuleType):
        self.rewrite = REWRITE.read_text()
        self.proposal_prompts: list[str] = []
        self.proposed: list[dict] = []
        self.declined = 0
        empty = {"usage": None}  # no usage: the client counts our prompts' characters / 4
        self.respond = server.reply_by_agent(
            {
                "lowering": self._lowering,
                "propose_techniques": self._propose,
                "soft_verify": server.reply(json.dumps({"ok": True, "reasons": []}), **empty),
                "perf_gap": server.reply(json.dumps({"analyses": []}), **empty),
                "parameter_update": server.reply(json.dumps({"updates": []}), **empty),
                # below the extractor's confidence threshold: the rule-based state stands
                "state_extractor": server.reply(
                    json.dumps({"state": "scripted", "confidence": 0.0, "rationale": "scripted"}),
                    **empty,
                ),
            }
        )
        self._server = server

    def _lowering(self, request):
        if f"(`{PROPOSED}`)" in request.prompt_text:
            return self._server.reply(f"Applied.\n```cuda\n{self.rewrite}```", usage=None)
        self.declined += 1
        return self._server.reply("The scripted model has no rewrite for this technique.")

    def _propose(self, request):
        prompt = request.prompt_text
        self.proposal_prompts.append(prompt)
        findings_part = prompt.split("Findings:", 1)[1] if "Findings:" in prompt else ""
        findings = _FINDING_LINE.findall(findings_part.split("\n\n", 1)[0])
        item = proposal_item(findings)
        self.proposed.append(item)
        return self._server.reply(json.dumps({"techniques": [item]}), usage=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/proposal-mechanics"))
    parser.add_argument("--copy-to", type=Path, help="copy the result file here")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    for name in ("row_sum.cu", "row_sum.py"):
        shutil.copy(EXAMPLE / name, args.work / name)
    kb_path = args.work / "kb.sqlite3"
    # one step per catalog technique (each declined), one for the proposal, one to spare
    depth = len(load_catalog().technique) + 2
    server_module = openai_server
    script = Script(server_module)
    command = [
        sys.executable, "-m", "kernelblaster", "optimize", str(args.work / "row_sum.cu"),
        "--kernel", KERNEL, "--rollouts", "1", "--depth", str(depth), "--seed", "0",
        "--proposals", "1", "--json",
    ]  # fmt: skip
    started = time.monotonic()
    with server_module.OpenAITestServer(responder=script.respond) as server:
        environment = {
            **os.environ,
            "KERNELBLASTER_LLM_BASE_URL": server.base_url,
            "KERNELBLASTER_LLM_MODEL": "test-model",  # the model the scripted server serves
            "KERNELBLASTER_KB": str(kb_path),
        }
        print("$ " + shlex.join(command), flush=True)
        done = subprocess.run(
            command, env=environment, cwd=REPO, stdout=subprocess.PIPE, text=True, timeout=540
        )
    wall_s = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        print(f"optimize printed no result (exit {done.returncode})", file=sys.stderr)
        return 1
    result = msgspec.json.decode(lines[-1], type=OptimizeResult)
    steps = [s for s in result.steps if s.technique == PROPOSED]
    with KnowledgeBase.open(kb_path) as kb:
        views = [v for v in proposal_views(kb) if v.technique == PROPOSED]
        attempts = kb.attempts(technique=PROPOSED)
        state = steps[0].state_before if steps else ""
        ranking = kb.rank(result.arch, state) if steps else []
    position = next((i for i, r in enumerate(ranking) if r.technique == PROPOSED), None)
    why = _WHY.search(script.proposal_prompts[0]) if script.proposal_prompts else None
    ok = bool(
        steps
        and steps[0].outcome in ("success", "regression")
        and any(a.outcome == steps[0].outcome for a in attempts)
        and views
    )
    payload = {
        "mechanics": True,
        "note": NOTE,
        "ok": ok,
        "command": shlex.join(command),
        "exit_code": done.returncode,
        "wall_s": round(wall_s, 1),
        "example": "examples/row_sum.cu",
        "kernel": KERNEL,
        "arch": result.arch,
        "trigger": why.group(1) if why else None,
        "declined_lowering_replies": script.declined,  # 3 per declined step (format retries)
        "proposal_step_index": result.steps.index(steps[0]) if steps else None,
        "proposed_items": script.proposed,
        "verdicts": msgspec.to_builtins(result.proposals),
        "proposal_step": msgspec.to_builtins(steps[0]) if steps else None,
        "steps": {
            "total": len(result.steps),
            "outcomes": dict(Counter(s.outcome for s in result.steps)),
        },
        "result": {
            "improved": result.improved,
            "speedup": result.speedup,
            "original_time_ms": result.original_time_ms,
            "best_time_ms": result.best_time_ms,
            "techniques": result.techniques,
            "error": result.error,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
        },
        "kb": {
            "proposal": msgspec.to_builtins(views[0]) if views else None,
            "attempts": msgspec.to_builtins(attempts),
            "rank": {
                "state": state,
                "position": position,
                "of": len(ranking),
                "entry": msgspec.to_builtins(ranking[position]) if position is not None else None,
            },
        },
    }
    path = write_result("proposal-mechanics", payload)
    print(f"wrote {path}: ok={ok}")
    if steps:
        step = steps[0]
        print(
            f"proposal step {result.steps.index(step) + 1} of {len(result.steps)}: "
            f"{step.outcome}, measured {step.measured_speedup}x, {step.state_before} -> "
            f"{step.state_after}; KB status {views[0].status if views else None}, rank "
            f"{position} of {len(ranking)}"
        )
    if not ok:
        print(f"not verified end to end: {result.error or 'see the result file'}", file=sys.stderr)
    if args.copy_to:
        args.copy_to.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, args.copy_to / path.name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
