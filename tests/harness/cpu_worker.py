"""The real harness worker (`python -m kernelblaster.harness.worker`) with the CPU standing in
for the GPU, for tests of what it does while nvcc builds, through real worker processes on a
machine without a GPU: the reference side of the check is made on the CPU, beside the build
(harness/build/beside.py), and the clean reference process runs on the CPU. Past the build,
the check itself needs a real GPU: the tests stop before it (a failed build, a cancel, a
timeout).

    worker_command = [sys.executable, ".../tests/harness/cpu_worker.py", MARKER]

MARKER is ignored; it puts a test's own folder on the worker's command line, where
tests/process_leaks.py looks for what a test left running."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kernelblaster.harness.check import check, clean_baselines
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.reference_side import prepare_reference_side
from kernelblaster.harness.worker import serve as worker


def _on_the_cpu(target, settings, *, clean, abandon, session_open=False):
    path = Path(target.reference or "")
    if not session_open:
        clean.open_for(target, settings)
    cpu = torch.device("cpu")
    side = prepare_reference_side(path, cpu, trials=settings.trials, abandon=abandon, sets=False)
    side.clean = clean
    return side


_clean: list[CleanReference] = []


def _clean_on_the_cpu(gpu: int) -> CleanReference:
    if not _clean:
        _clean.append(CleanReference("cpu", answers=clean_baselines.ANSWERS))
    return _clean[0]


check.gpu_problem = lambda settings: None
check.prepare_reference = _on_the_cpu
worker.clean_reference = _clean_on_the_cpu

if __name__ == "__main__":
    sys.exit(worker.main())
