"""The worker zygote on a GPU host: its imports open no GPU driver (else it refuses and nothing
is forked), a spare it forks verifies, times and profiles a kernel as an exec'd worker does,
and that spare's clean reference process was forked too (no torch import of its own). Real
processes, as the language server runs them (SpareWorkers, run_harness)."""

from __future__ import annotations

import asyncio

import psutil
import pytest

from kernelblaster.harness.protocol.worker_client import (
    SpareWorkers,
    default_harness_command,
    run_harness,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.harness.protocol.zygote_client import ForkedProcess
from kernelblaster.settings import Settings
from tests.harness.gpu_examples import copy_example

pytestmark = pytest.mark.gpu


async def _forked_spare(spares: SpareWorkers, request: WorkerRequest) -> ForkedProcess:
    """Run `request` until the spare left waiting is one the zygote forked."""
    for _ in range(20):
        waiting = spares.waiting()
        if waiting and isinstance(waiting[0], ForkedProcess):
            return waiting[0]
        await run_harness(request, request.settings, spares=spares)
        await asyncio.sleep(1.0)
    raise AssertionError(f"no forked spare; the zygote said {spares._zygote.ready}")


def _clean_children(worker: ForkedProcess) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(worker.pid).children()
        if child.status() != psutil.STATUS_ZOMBIE
    ]


def test_a_forked_spare_profiles_a_kernel_and_forks_its_clean_process(tmp_path):
    relu = copy_example("relu", tmp_path)
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    request = WorkerRequest(task="profile", source=str(relu), settings=settings, depth="quick")

    async def run():
        spares = SpareWorkers(least=1, most=1)
        try:
            await spares.ready(default_harness_command(), 0)
            spare = await _forked_spare(spares, request)
            assert spares._zygote.ready is not None and spares._zygote.ready.refused is None
            await asyncio.sleep(6.0)  # its clean process started first of all, then made ahead
            clean = _clean_children(spare)
            assert clean, "the forked spare started no clean reference process"
            # forked from the worker: the zygote's command line, not multiprocessing's spawn
            assert all("spawn_main" not in " ".join(child.cmdline()) for child in clean)
            response = await run_harness(request, settings, spares=spares)
            return response
        finally:
            await spares.close()

    response = asyncio.run(run())
    assert response.error is None, response.error
    assert response.check is not None and response.check.verify is not None
    assert response.check.verify.ok and response.check.timing is not None
    assert response.profile is not None and response.states
    assert response.check.phase_seconds["spare_age"] > 5.0  # it ran in the forked spare
