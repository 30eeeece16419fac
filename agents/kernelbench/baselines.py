"""A problem's PyTorch baselines measured apart from its checks, so torch.compile's compilation
(tens of seconds of CPU) stays out of the problem's time: a worker of their own compiles while
the checks run, then takes its turn at the GPU's gate (gpu_gates.py), between two evaluations,
never beside one. The turn is given through a pipe (GPU_FREE_FD_ENV) whose end of file says go.
The job's PhaseTimes say where its seconds went."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from kernelblaster.agents.loop.evaluation import harness_phases
from kernelblaster.agents.loop.gpu_gates import GpuGates
from kernelblaster.harness.protocol.optimize_protocol import PhaseTimes, Span
from kernelblaster.harness.protocol.records import CheckResult, HarnessError
from kernelblaster.harness.protocol.worker_client import run_harness
from kernelblaster.harness.protocol.worker_protocol import (
    GPU_FREE_FD_ENV,
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.settings import Settings


class BaselinesJob:
    """The baselines of `reference` on settings.gpu, measured in a thread from now on; `join()`
    waits for them."""

    def __init__(self, reference: Path, source: Path, settings: Settings, gates: GpuGates):
        self._request = WorkerRequest(
            task="baselines", source=str(source), reference=str(reference), settings=settings
        )
        self._gates, self._gpu = gates, settings.gpu
        self.phases = PhaseTimes()
        self._response: Future[WorkerResponse] = Future()
        self._thread = threading.Thread(target=self._run, name="baselines", daemon=True)
        self._thread.start()

    def join(self) -> tuple[CheckResult | None, HarnessError | None]:
        """The measured baselines (`eager`, `compiled`) as the worker's check carries them, or
        the error that stopped them; the wait for them lands in `phases`."""
        began = time.time()
        response = self._response.result()
        self._thread.join()
        waited = {"baselines_joined_wait": round(time.time() - began, 4)}
        self.phases.parts = {**self.phases.parts, **waited}
        return response.check, response.error

    def _run(self) -> None:
        try:
            self._response.set_result(self._measure())
        except BaseException as exc:  # noqa: BLE001 - handed to join(), which raises it
            self._response.set_exception(exc)

    def _measure(self) -> WorkerResponse:
        read_end, write_end = os.pipe()  # the worker's turn: this end closed
        wants_gpu = threading.Event()
        asked: list[float] = []

        def on_progress(message: WorkerProgress) -> None:
            if message.wants_gpu:
                asked.append(time.time())
                wants_gpu.set()

        began = time.time()
        worker = run_harness(
            self._request,
            self._request.settings,
            on_progress=on_progress,
            env={GPU_FREE_FD_ENV: str(read_end)},
            pass_fds=(read_end,),
        )
        try:
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="baselines-worker") as pool:
                running = pool.submit(asyncio.run, worker)
                while not wants_gpu.wait(0.05) and not running.done():
                    pass
                if not wants_gpu.is_set():  # it stopped before asking: its error says why
                    return running.result()
                spans = [Span(kind="cpu", start=began, end=asked[0])]
                with self._gates.turn(self._gpu) as granted:
                    os.close(write_end)
                    write_end = -1
                    response = running.result()
                    ended = time.time()
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        phases = harness_phases(response)
        phases.gpu_queue = round(granted - asked[0], 4)
        phases.evaluation = round(ended - granted, 4)
        phases.spans = [*spans, Span(kind="gpu", start=granted, end=ended, gpu=self._gpu)]
        self.phases = phases
        return response
