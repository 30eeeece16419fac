"""For the tests of rollouts running at once (threads, Ray tasks): a recorded harness that logs
which GPU each candidate was evaluated on, and holds the first two candidate evaluations until
both have arrived, so the first two rollouts are known to have ranked before either recorded.
It is importable by Ray workers (the tests put this folder on their PYTHONPATH), and keeps its
log and barrier in files, which threads and processes share alike. Also: an LLM responder that
answers each agent by its prompt, whatever order the rollouts' requests arrive in."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from bench.openai_server import RecordedRequest, Scripted, reply, reply_by_agent
from tests.agents.loop.test_loop import RecordedHarness, cuda, soft

FIRST_TOGETHER = 2  # how many first candidate evaluations wait for each other
BARRIER_TIMEOUT_S = 60.0


class GpuLoggingHarness(RecordedHarness):
    def __init__(self, scratch: Path):
        super().__init__()
        self.scratch = scratch
        (scratch / "tickets").mkdir(parents=True, exist_ok=True)

    def __call__(self, source, text, kernel, settings, **options):
        if "KB_RESULT" in text and not options.get("sanitize"):  # a candidate, not the original
            self._log(settings.gpu_index)
            self._first_ones_meet()
        return super().__call__(source, text, kernel, settings, **options)

    def evaluations(self) -> list[dict]:
        log = self.scratch / "evaluations.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def _log(self, gpu_index: int) -> None:
        line = {
            "pid": os.getpid(),
            "gpu_index": gpu_index,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        fd = os.open(self.scratch / "evaluations.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, (json.dumps(line) + "\n").encode())
        os.close(fd)

    def _first_ones_meet(self) -> None:
        tickets = self.scratch / "tickets"
        for number in range(FIRST_TOGETHER):
            try:
                os.close(os.open(tickets / str(number), os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                continue
            deadline = time.monotonic() + BARRIER_TIMEOUT_S
            while len(list(tickets.iterdir())) < FIRST_TOGETHER:
                if time.monotonic() > deadline:
                    raise TimeoutError("the first rollouts never ran at the same time")
                time.sleep(0.02)
            return


def by_prompt(candidate: str) -> Callable[[RecordedRequest], Scripted]:
    """The lowering agent gets `candidate` (e.g. "broken", "verified 0.5"), the other agents a
    reply that changes nothing."""
    return reply_by_agent(
        {
            "lowering": reply(cuda(candidate)),
            "soft_verify": reply(soft(True)),
            "perf_gap": reply(json.dumps({"analyses": []})),
            "parameter_update": reply(json.dumps({"updates": []})),
        }
    )
