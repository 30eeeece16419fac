"""The scripted LSP session the server tests and bench/lsp.py share: a workspace whose harness
and agents workers are the replay worker (bench/replay_worker.py), answering with responses
recorded from real ncu reports (tests/fixtures/ncu/, read as data)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from kernelblaster.harness.analysis.classify import classify_report
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.analysis.ptxas import parse_ptxas_resources
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse

REPO = Path(__file__).resolve().parents[1]
NCU_FIXTURES = REPO / "tests" / "fixtures" / "ncu"
FIVE = NCU_FIXTURES / "h100-five"
REPLAY = Path(__file__).resolve().parent / "replay_worker.py"
TIMEOUT_S = 20.0


def five_response(source: Path) -> WorkerResponse:
    """What the worker reported for five.cu on the H100: its ptxas resources and the real ncu
    report. The report names the file as it was profiled (/src/five.cu), like a worker running
    in a container would."""
    build = BuildResult(
        ok=True,
        source=str(source),
        arch="sm_90",
        command=["nvcc", "-arch=sm_90", "-lineinfo", str(source)],
        resources=parse_ptxas_resources((FIVE / "ptxas.txt").read_text(), arch="sm_90"),
    )
    report = read_report(FIVE / "five.ncu-rep", depth="full")
    return WorkerResponse(build=build, profile=report, states=classify_report(report))


class Workspace:
    """A temporary workspace: sources, the replay control directory, a KB and settings."""

    def __init__(self, root: Path) -> None:
        self.root = root / "ws"
        self.control = root / "control"
        self.kb_path = root / "kb.sqlite3"
        self.root.mkdir()
        self.control.mkdir()

    def add(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text)
        return path

    def record(self, kind: str, response: msgspec.Struct) -> None:
        (self.control / f"{kind}.json").write_bytes(msgspec.json.encode(response))

    def control_file(self, name: str, text: str = "") -> None:
        (self.control / name).write_text(text)

    def settings(self, **extra: object) -> dict:
        replay = [sys.executable, str(REPLAY), str(self.control)]
        return {
            "workerCommand": [*replay, "harness"],
            "optimizeWorkerCommand": [*replay, "optimize"],
            "kbPath": str(self.kb_path),
            "llmBaseUrl": "http://127.0.0.1:9/v1",
            **extra,
        }

    def runs(self) -> list[dict]:
        log = self.control / "log.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]


async def wait_until(condition: Callable[[], object], timeout: float = TIMEOUT_S) -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        await asyncio.sleep(0.02)
    return value


def copy_five(workspace: Workspace) -> Path:
    source = workspace.root / "five.cu"
    shutil.copyfile(FIVE / "five.cu", source)
    source.chmod(0o644)
    workspace.record("harness", five_response(source))
    return source
