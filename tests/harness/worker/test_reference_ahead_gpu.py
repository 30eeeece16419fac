"""What spare workers prepare ahead of their request, on a GPU: reference sides
(harness/worker/reference_ahead.py) — a save of the same file verifies with the side its spare made
while waiting; a reference edited after that side was made, or a request for another file,
gets a side of its own — and, for a profile, the in-process counters' set-up. Through the real
worker processes and SpareWorkers, as the language server runs them."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from pathlib import Path

import psutil
import pytest

from kernelblaster.harness.check import cupti
from kernelblaster.harness.protocol.worker_client import SpareWorkers, harness_command, run_harness
from kernelblaster.harness.protocol.worker_protocol import (
    WorkerRequest,
    WorkerResponse,
    expected_request_env,
)
from kernelblaster.settings import Settings
from tests.harness.gpu_examples import copy_example
from tests.process_leaks import wait_for

pytestmark = pytest.mark.gpu

# Time for a spare to import torch, create its context and make relu's side (~4 s on an H100).
SPARE_READY_S = 12.0


def _request(source: Path, settings: Settings, task: str = "check") -> WorkerRequest:
    return WorkerRequest(task=task, source=str(source), settings=settings)


def _verified(response: WorkerResponse) -> bool:
    assert response.error is None, response.error
    assert response.check is not None and response.check.verify is not None
    return response.check.verify.ok


def test_a_save_verifies_with_the_side_its_spare_made_and_only_when_still_true(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    relu = copy_example("relu", tmp_path / "a")
    softmax = copy_example("softmax", tmp_path / "b")
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    reference = relu.with_suffix(".py")
    original = reference.read_text()

    async def run() -> list[WorkerResponse]:
        spares = SpareWorkers()
        try:
            first = await run_harness(_request(relu, settings), settings, spares=spares)
            again = await run_harness(_request(relu, settings), settings, spares=spares)
            await asyncio.sleep(SPARE_READY_S)  # its spare has made relu's side by now
            reference.write_text(original.replace("torch.relu(x)", "torch.relu(x) * 2"))
            doubled = await run_harness(_request(relu, settings), settings, spares=spares)
            other = await run_harness(_request(softmax, settings), settings, spares=spares)
            return [first, again, doubled, other]
        finally:
            await spares.close()

    first, again, doubled, other = asyncio.run(run())
    assert _verified(first) and _verified(again)
    assert "reference_wait" in again.check.phase_seconds
    assert "ahead_reference_probe" in again.check.phase_seconds
    # made by the spare's child before the request came, and handed over then
    assert "ahead_clean_reference_sets" in again.check.phase_seconds
    assert "clean_reference_sets" not in again.check.phase_seconds
    assert "clean_reference_handed_over" in again.check.phase_seconds
    assert "reference_load" not in again.check.phase_seconds
    # The side made for the old reference would have passed relu.cu: the new one fails it.
    assert not _verified(doubled)
    assert "reference_wait" not in doubled.check.phase_seconds
    assert _verified(other)
    assert "reference_wait" not in other.check.phase_seconds
    assert "reference_load" in other.check.phase_seconds
    assert "clean_reference_load" in other.check.phase_seconds  # made for the request
    for response in (first, again, doubled, other):  # where a save's seconds went
        phases = response.check.phase_seconds
        assert phases["worker_before_check"] <= phases["worker_to_timing"]
        assert "verify_sets" in phases and "verify_setup" in phases


def test_a_spare_expecting_a_profile_sets_the_counters_up_before_its_request(tmp_path):
    """The counter library is loaded (and CUPTI's profiler set up) by the spare while it waits,
    so none of it runs beside the request's verification and timing; a spare expecting a check
    leaves it alone."""
    relu = copy_example("relu", tmp_path)
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    library, _ = cupti.build_library(settings)
    assert library.ok and library.artifact is not None
    artifact = str(Path(library.artifact).resolve())

    def loaded(pid: int) -> bool:
        maps = psutil.Process(pid).memory_maps()
        return any(str(Path(m.path).resolve()) == artifact for m in maps if m.path)

    async def spare_loads_it(task: str, within_s: float) -> tuple[bool, float]:
        spares = SpareWorkers()
        try:
            hint = expected_request_env(_request(relu, settings, task))
            began = time.monotonic()
            await spares.ready(harness_command(settings), 0, hint)
            (spare,) = spares.waiting()
            seen = await asyncio.to_thread(wait_for, partial(loaded, spare.pid), within_s)
            return seen, time.monotonic() - began
        finally:
            await spares.close()

    async def run() -> tuple[bool, bool]:
        for_profile, took = await spare_loads_it("profile", 60)
        # twice as long as the profile's spare took to load it: time enough to have done so
        for_check, _ = await spare_loads_it("check", 2 * took)
        return for_profile, for_check

    for_profile, for_check = asyncio.run(run())
    assert for_profile
    assert not for_check
