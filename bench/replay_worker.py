"""Stand-in for the harness and agents workers in server tests: it speaks the real protocol and
replays a response recorded in the test's control folder, built from real fixtures.

    python replay_worker.py CONTROL_DIR harness|optimize

CONTROL_DIR/
  harness.json / optimize.json / init.json   the response to replay
  delay, delay_once                          seconds to wait before answering (every run / next)
  busy                                       spend the delay computing (CPU load)
  crash_once                                 the next run dies of SIGSEGV after one progress line
  progressive                                verification and timing first, then `background`,
                                             then wait for a `release` file before the rest
  early.json                                 with `progressive`: a profile sent after the timing
  log.jsonl                                  appended per run: pid, event, sha, request"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path


def claim(control: Path, name: str) -> str | None:
    """Take a *_once control file for this run only (rename is atomic), returning its text."""
    mine = control / f"{name}.{os.getpid()}"
    try:
        os.rename(control / name, mine)
    except FileNotFoundError:
        return None
    return mine.read_text()


def log(control: Path, event: str, **fields: object) -> None:
    with open(control / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"pid": os.getpid(), "event": event, **fields}) + "\n")


def emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def send_checked(response: dict) -> dict:
    """The progress message a worker sends once verified and timed, before its profile."""
    check = {
        key: value
        for key, value in response["check"].items()
        if key not in ("eager", "compiled", "speedup_vs_eager", "speedup_vs_compile")
    }
    message = {
        "type": "progress",
        "phase": "profile",
        "message": "verified and timed (replay)",
        "build": response.get("build"),
        "check": check,
    }
    emit(message)
    return message


def main() -> int:
    control, kind = Path(sys.argv[1]), sys.argv[2]
    request = json.loads(sys.stdin.read())
    if request.get("type") == "init":
        kind = "init"
    text = request.get("source_text") or request.get("unsaved_text")
    if text is None:
        text = Path(request.get("source") or request["reference"]).read_text(encoding="utf-8")
    request.pop("settings", None)
    request.pop("source_text", None)
    request.pop("unsaved_text", None)
    # Claim this run's controls before saying it started: a test that kills the run it saw
    # start must not leave them to the next one.
    crash = claim(control, "crash_once") is not None
    delay = claim(control, "delay_once")
    if delay is None and (control / "delay").exists():
        delay = (control / "delay").read_text()
    log(control, "start", sha=hashlib.sha256(text.encode()).hexdigest(), **request)
    if kind == "harness":
        emit({"type": "progress", "phase": "build", "message": "building (replay)", "percent": 10})
    elif kind == "init":
        emit({"type": "progress", "attempt": 1, "attempts": 4, "message": "reply 1 (replay)"})
    else:
        emit({"type": "progress", "step": 1, "total": 2, "message": "rollout 1 step 1 (replay)"})
    # a build (ahead of a save) answers at once: only the save's run is held
    if kind == "harness" and request["task"] != "build" and (control / "progressive").exists():
        checked = send_checked(json.loads((control / "harness.json").read_text()))
        if (control / "early.json").exists():
            early = json.loads((control / "early.json").read_text())
            emit(
                {
                    **checked,
                    "message": "state from the in-process counters (replay); ncu for the lines",
                    "profile": early["profile"],
                    "states": early["states"],
                }
            )
        emit(
            {
                "type": "progress",
                "phase": "profile",
                "message": "profiling (replay, background)",
                "background": True,
            }
        )
        while claim(control, "release") is None:
            time.sleep(0.02)
    if crash:
        print("replay worker: simulated segmentation fault", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    if delay and (control / "busy").exists():
        deadline = time.monotonic() + float(delay)
        while time.monotonic() < deadline:
            hashlib.sha256(text.encode()).digest()
    elif delay:
        time.sleep(float(delay))
    if kind == "harness":
        emit(
            {"type": "progress", "phase": "profile", "message": "profiling (replay)", "percent": 60}
        )
    response = json.loads((control / f"{kind}.json").read_text())
    emit({"type": "result", **response})
    log(control, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
