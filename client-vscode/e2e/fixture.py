"""Prepares the end-to-end tests' workspace the way a user's looks after working on a GPU
machine, so a machine without one shows everything: `softmax.cu` + `softmax.py` (the example
pair), the saved result of its real H100 profile (tests/fixtures/ncu/h100-examples), a knowledge
base whose track record includes attempts on this very kernel (a chain of two steps), and the
kept best candidate of that kernel.

    python client-vscode/e2e/fixture.py WORKSPACE KB_FILE

The progress tests' workspace runs the replay worker (bench/replay_worker.py) instead of
the real one, since this machine has no GPU: each save is answered with the same real H100
profile, timed at the median the test asks for, so a save that makes the kernel faster has a
known delta. `timed` writes the response the next save replays:

    python client-vscode/e2e/fixture.py progress WORKSPACE CONTROL_DIR PYTHON
    python client-vscode/e2e/fixture.py timed WORKSPACE CONTROL_DIR MEDIAN_MS
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from pathlib import Path

import msgspec

from kernelblaster.harness.analysis.classify import classify, classify_report
from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import BuildResult, CheckResult, Timing, VerifyResult
from kernelblaster.harness.protocol.worker_protocol import WorkerResponse
from kernelblaster.kb.records import Attempt, code_hash
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.server.results.cache import ResultCache, new_result
from kernelblaster.server.editor.documents import text_hash
from kernelblaster.server.pipeline.optimize import kept_candidate_path

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "tests" / "fixtures" / "ncu" / "h100-examples" / "softmax.ncu-rep"
KERNEL = "softmax_rowthread"


def saved_result(source: Path) -> None:
    report = read_report(REPORT, depth="full")
    response = WorkerResponse(
        build=BuildResult(ok=True, source=str(source), arch=report.arch),
        profile=report,
        states=classify_report(report),
    )
    ResultCache().save(new_result(source, text_hash(source.read_text()), response))


def knowledge_base(kb_file: Path, source: Path, arch: str, state: str) -> None:
    original = source.read_text()
    coalesced = original.replace("in[c]", "in[c * 1]")  # stands for a rewrite: only the hash
    vectorized = coalesced + "// vectorized\n"
    kept = kept_candidate_path(source, KERNEL)
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(vectorized)
    now = time.time()

    def attempt(n: int, technique: str, start: str, end: str, **fields) -> Attempt:
        return Attempt(
            id=uuid.uuid4().hex,
            time=now - 3600 + 60 * n,
            arch=arch,
            kernel=fields.pop("kernel", KERNEL),
            source_hash=code_hash(start),
            candidate_hash=code_hash(end),
            before_state=state,
            technique=technique,
            **fields,
        )

    with KnowledgeBase.open(kb_file) as kb:
        # Other projects' history of the same state: a spread of measured speedups.
        for n, measured in enumerate((1.4, 2.2, 3.1, 0.8)):
            kb.record(
                attempt(
                    n,
                    "coalesce_global_access",
                    f"other {n}",
                    f"other {n} rewritten",
                    kernel="row_reduce",
                    predicted_speedup=1.5,
                    measured_speedup=measured,
                    outcome="success" if measured > 1 else "regression",
                )
            )
        kb.record(
            attempt(
                10,
                "coalesce_global_access",
                original,
                coalesced,
                predicted_speedup=1.6,
                measured_speedup=2.4,
                outcome="success",
                after_state="memory.dram",
                correctness_detail="max abs err 2e-7 over 3 seeds",
            )
        )
        kb.record(
            attempt(
                11,
                "vectorized_loads",
                coalesced,
                vectorized,
                predicted_speedup=1.2,
                outcome="compile_error",
            )
        )
        kb.add_note(
            arch,
            state,
            "coalesce_global_access",
            "Row-per-thread kernels: give each row to a warp so lanes read consecutive columns.",
        )


def timed(workspace: Path, control: Path, median_ms: float) -> None:
    """The response of a verified run of softmax.cu at `median_ms` (±1% between its 20th and
    80th percentiles), with its real H100 profile, for the replay worker's next run."""
    source = (workspace / "softmax.cu").resolve()
    report = read_report(REPORT, depth="full")
    timing = Timing(
        median_ms=median_ms,
        min_ms=median_ms * 0.98,
        max_ms=median_ms * 1.02,
        p20_ms=median_ms * 0.99,
        p80_ms=median_ms * 1.01,
        repetitions=50,
    )
    check = CheckResult(
        source=str(source),
        target_kind="plain",
        gpu=report.device,
        arch=report.arch,
        verify=VerifyResult(ok=True, trials=3, atol=1e-5, rtol=1e-5, seeds=[11, 12, 13]),
        timing=timing,
    )
    response = WorkerResponse(
        build=BuildResult(ok=True, source=str(source), arch=report.arch),
        check=check,
        profile=report,
        states=classify_report(report),
    )
    control.mkdir(parents=True, exist_ok=True)
    (control / "harness.json").write_bytes(msgspec.json.encode(response))


def progress(workspace: Path, control: Path, python: str) -> None:
    """softmax.cu + softmax.py whose kernelblaster.toml runs the replay worker (honoured in a
    trusted workspace), answering the first run at 2 ms per call (the H100 profile's kernel takes
1.44 ms under ncu; every save replays that same profile: only the timing changes)."""
    workspace.mkdir(parents=True, exist_ok=True)
    for name in ("softmax.cu", "softmax.py"):
        shutil.copyfile(REPO / "examples" / name, workspace / name)
    replay = [python, str(REPO / "bench" / "replay_worker.py"), str(control)]
    (workspace / "kernelblaster.toml").write_text(
        f"worker_command = {json.dumps([*replay, 'harness'])}\nbuild_on_change = false\n"
    )
    timed(workspace, control, 2.0)


def main(workspace: Path, kb_file: Path) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    for name in ("softmax.cu", "softmax.py"):
        shutil.copyfile(REPO / "examples" / name, workspace / name)
    source = (workspace / "softmax.cu").resolve()
    saved_result(source)
    report = read_report(REPORT, depth="full")
    state = classify(report.kernels[0], arch=report.arch).state
    knowledge_base(kb_file, source, report.arch, state)


if __name__ == "__main__":
    if sys.argv[1] == "progress":
        progress(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "timed":
        timed(Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]))
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
