"""Running the rollouts of one optimize run at the same time, one worker per GPU.

A worker is a thread: the heavy part of a step (build, verify, time, profile) runs in a harness
worker process on the worker's GPU (`gpu_index` in the settings it passes on), and the LLM calls
wait on the network, so threads are enough. Each thread runs in a copy of the caller's context,
so the run's spare workers (harness/worker_client.keep_spare_workers) serve its evaluations,
each GPU's from its own spare. The workers share the KB (one connection, one
transaction at a time) and the LLM client. Each attempt is recorded as it happens, so rollouts
running alongside, and those that start later, rank with it."""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

from kernelblaster.agents.loop import (
    RolloutPlan,
    RolloutResult,
    RolloutServices,
    RunRollouts,
    in_sequence,
    run_rollout,
)
from kernelblaster.settings import Settings


def runner_for(settings: Settings) -> RunRollouts:
    """One worker per GPU in `gpu_index` (or `parallel_gpu_jobs` workers, if that is more,
    taking the GPUs in turn); one worker runs the rollouts one after another."""
    gpus = settings.gpus()
    workers = max(settings.parallel_gpu_jobs, len(gpus))
    return in_sequence if workers == 1 else OnGpus(gpus, workers)


def on_gpus(gpus: list[int]) -> RunRollouts:
    """One worker per GPU."""
    return OnGpus(gpus, len(gpus))


@dataclasses.dataclass(frozen=True)
class OnGpus:
    """Run the rollouts on `workers` threads, worker i on gpus[i % len(gpus)], each taking the
    next rollout not yet started. A rollout that hits an error (the LLM or the harness gone)
    stops the others at their next step."""

    gpus: list[int]
    workers: int

    def __call__(
        self, plan: RolloutPlan, rollouts: int, services: RolloutServices
    ) -> list[RolloutResult]:
        next_rollout = iter(range(rollouts))
        results: list[RolloutResult] = []
        lock, stop = threading.Lock(), threading.Event()
        stoppable = dataclasses.replace(
            services, cancelled=lambda: stop.is_set() or services.cancelled()
        )

        def work(slot: int) -> None:
            gpu = self.gpus[slot % len(self.gpus)]
            on_gpu = plan.on_gpu(gpu)
            try:
                while not stop.is_set():
                    with lock:
                        rollout = next(next_rollout, None)
                    if rollout is None:
                        return
                    result = run_rollout(on_gpu, rollout, stoppable)
                    with lock:
                        results.append(result)
                    if result.error or result.cancelled:
                        stop.set()
            except BaseException:
                stop.set()  # a crash ends the run: the others stop at their next step
                raise

        count = max(1, min(self.workers, rollouts))
        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="rollout") as pool:
            # A context can be entered by one thread at a time: a copy for each.
            futures = [
                pool.submit(contextvars.copy_context().run, work, slot) for slot in range(count)
            ]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                stop.set()  # Ctrl-C here: the rollouts stop at their next step, not at the end
                raise
        return results
