"""The KernelBench runner end to end on a GPU, with no model: a mechanics run.

    python3 -m bench.kernelbench_mechanics                      # both levels
    python3 -m bench.kernelbench_mechanics --level level1 --copy-to "$OUT"

`kernelblaster bench kernelbench` over our reduced copies of 5 level-1 and 3 level-2 problems,
the scripted endpoint answering from bench/kernelbench/answers (a naive init kernel and a faster
one per problem). Its numbers are those of kernels we wrote, not of a model. Writes
bench/results/kernelbench-<gpu>-level{1,2}.json after every problem (a rerun continues), then the
.md and .png."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench import openai_server
from bench.common import REPO

PROBLEMS = REPO / "bench" / "kernelbench"
ANSWERS = PROBLEMS / "answers"
LEVELS = ("level1", "level2")
NOTE = (
    "The problems are our own small-sized copies of KernelBench problems, in its format "
    "(bench/kernelbench/level*/, sizes reduced so that the run fits a few minutes). The scripted "
    "endpoint answers init with a naive CUDA kernel and the optimization step with a faster "
    "one, both written for these problems (bench/kernelbench/answers/)."
)
_PROBLEM_FILE = re.compile(r"Problem file: `([^`]+)\.py`")
_LAUNCHER = re.compile(r'extern\s+"C"\s+\w+\s+(\w+)\s*\(')


def prepared_answers(answers: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The init answer of each problem by its name, and the faster kernel by the name of its
    launcher (what a lowering prompt's current source shows)."""
    first = {p.name.removesuffix(".init.cu"): p.read_text() for p in answers.glob("*.init.cu")}
    faster = {}
    for path in answers.glob("*.fast.cu"):
        text = path.read_text()
        launcher = _LAUNCHER.search(text)
        if launcher is None:
            raise ValueError(f'{path} defines no extern "C" launcher')
        faster[launcher.group(1)] = text
    return first, faster


def responder(server: ModuleType, answers: Path) -> Callable:
    """Answers each agent by its prompt: init with the problem's naive kernel, lowering with
    the faster kernel of the launcher in the current source, the verifier with "ok", the
    policy update and the state extractor with nothing to change."""
    first, faster = prepared_answers(answers)
    replies = {
        "init": server.reply("init"),
        "lowering": server.reply("lowering"),
        "soft_verify": server.reply(json.dumps({"ok": True, "reasons": []}), usage=None),
        "perf_gap": server.reply(json.dumps({"analyses": []}), usage=None),
        "parameter_update": server.reply(json.dumps({"updates": []}), usage=None),
        # below the extractor's confidence threshold: the rule-based state stands
        "state_extractor": server.reply(
            json.dumps({"state": "scripted", "confidence": 0.0, "rationale": "scripted"}),
            usage=None,
        ),
    }
    by_agent = server.reply_by_agent(replies)

    def respond(request):
        answer = by_agent(request)
        prompt = request.prompt_text
        if answer is replies["init"]:
            problem = _PROBLEM_FILE.search(prompt)
            code = first.get(problem.group(1)) if problem else None
        elif answer is replies["lowering"]:
            launcher = _LAUNCHER.search(prompt)
            code = faster.get(launcher.group(1)) if launcher else None
        else:
            return answer
        if code is None:
            return server.HttpError(400, "no prepared answer for this prompt")
        # No usage in the reply: the client counts the characters of our prompts (/ 4).
        return server.reply(f"```cuda\n{code}```", usage=None)

    return respond


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--level", choices=[*LEVELS, "all"], default="all")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--work", type=Path, default=Path("/tmp/kernelbench-mechanics"))
    parser.add_argument("--copy-to", type=Path, help="copy the results here after each level")
    parser.add_argument("--restart", action="store_true", help="start the results over")
    args = parser.parse_args()
    server_module = openai_server
    levels = LEVELS if args.level == "all" else (args.level,)
    failed = []
    with server_module.OpenAITestServer(responder=responder(server_module, ANSWERS)) as server:
        environment = {
            **os.environ,
            "KERNELBLASTER_LLM_BASE_URL": server.base_url,
            "KERNELBLASTER_LLM_MODEL": "test-model",  # the model the scripted server serves
        }
        for level in levels:
            command = [
                sys.executable, "-m", "kernelblaster", "bench", "kernelbench",
                str(PROBLEMS / level), "--mechanics", "--note", NOTE,
                "--rollouts", "1", "--depth", "1", "--init-attempts", "2", "--seed", "1",
                "--results", str(args.results), "--work", str(args.work / level),
                "--kb", str(args.work / "kb.sqlite3"),
                *(["--restart"] if args.restart else []),
            ]  # fmt: skip
            print("$ " + shlex.join(command), flush=True)
            if subprocess.run(command, env=environment, cwd=REPO).returncode != 0:
                failed.append(level)
            if args.copy_to:
                args.copy_to.mkdir(parents=True, exist_ok=True)
                for path in args.results.glob("kernelbench-*"):
                    shutil.copy(path, args.copy_to / path.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
