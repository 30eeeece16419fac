"""A harness worker for tests of how workers are started and ended. It speaks the worker
protocol (harness/protocol/worker_protocol.py) but answers from a file instead of building
anything, and logs what those tests need: each process's pid, the GPU it was asked to prewarm on
(KERNELBLASTER_PREWARM, set on spare workers), and the GPU (Settings.gpu) and candidate of the
request it got.

    worker_command = [sys.executable, ".../tests/logging_worker.py", LOG, ANSWER]

ANSWER is a file holding a WorkerResponse as JSON, whose timings take the milliseconds of the
request's `KB_RESULT_verified_<ms>` line (the candidates of tests/agents/loop/test_loop.py; 1.0 for
the original); or the word `hang`: the worker then never answers, like a profile that runs
until it is killed. `events(LOG)` reads the log back."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path


def events(log: Path) -> list[dict]:
    """Every line the workers logged, in order: {"event": "started", "pid", "prewarm"} when a
    process starts, {"event": "request", "pid", "gpu", "candidate"} when it reads its request."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _log(log: str, **event: object) -> None:
    # One write of one line in append mode: the lines of several workers don't interleave.
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (json.dumps({"pid": os.getpid(), **event}) + "\n").encode())
    os.close(fd)


def _answer(answer: str, source_text: str) -> dict:
    response = json.loads(Path(answer).read_text())
    marker = re.search(r"KB_RESULT_verified_([\d.]+)", source_text)
    ms = float(marker.group(1)) if marker else 1.0
    timing = (response.get("check") or {}).get("timing")
    if timing is not None:
        timing.update(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms)
    return response


def main(log: str, answer: str) -> None:
    import msgspec

    from kernelblaster.harness.protocol.processes import exit_with_parent
    from kernelblaster.settings import Settings

    exit_with_parent()  # as the real worker does: it ends with the process that started it
    _log(log, event="started", prewarm=os.environ.get("KERNELBLASTER_PREWARM"))
    request = json.loads(sys.stdin.buffer.read())
    source_text = request.get("source_text") or ""
    candidate = re.search(r"KB_RESULT_\w+", source_text)
    settings = msgspec.convert(request["settings"], Settings)
    _log(
        log, event="request", gpu=settings.gpu, candidate=candidate.group(0) if candidate else None
    )
    if answer == "hang":
        while True:
            time.sleep(60)
    print(json.dumps(_answer(answer, source_text)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
