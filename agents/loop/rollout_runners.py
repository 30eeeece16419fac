"""Running the rollouts of one optimize run at the same time, on one GPU or several. Each rollout is
a thread (its LLM calls wait on the network; its evaluations run in workers, queued per GPU by
the gates), so N GPUs evaluate N candidates at once; rollout r runs on gpus[r % len(gpus)].
Threads share the KB, the LLM client and the run's spare workers."""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

from kernelblaster.agents.loop.plan import RolloutPlan, RolloutResult, RolloutServices, RunRollouts
from kernelblaster.agents.loop.rollout import run_rollout
from kernelblaster.settings import Settings


def runner_for(settings: Settings) -> RunRollouts:
    """Every rollout at once, over the GPUs of `gpu_index` (their evaluations queue per GPU)."""
    return OnGpus(settings.gpus())


def on_gpus(gpus: list[int]) -> RunRollouts:
    return OnGpus(gpus)


@dataclasses.dataclass(frozen=True)
class OnGpus:
    """Run every rollout in a thread of its own, rollout r on gpus[r % len(gpus)]. A rollout
    that hits an error (the LLM or the harness gone) stops the others at their next step."""

    gpus: list[int]

    def __call__(
        self, plan: RolloutPlan, rollouts: int, services: RolloutServices
    ) -> list[RolloutResult]:
        results: list[RolloutResult] = []
        lock, stop = threading.Lock(), threading.Event()
        stoppable = dataclasses.replace(
            services, cancelled=lambda: stop.is_set() or services.cancelled()
        )

        def work(rollout: int) -> None:
            on_gpu = plan.on_gpu(self.gpus[rollout % len(self.gpus)])
            try:
                result = run_rollout(on_gpu, rollout, stoppable)
            except BaseException:
                stop.set()  # a crash ends the run: the others stop at their next step
                raise
            with lock:
                results.append(result)
            if result.error or result.cancelled:
                stop.set()

        if rollouts < 1:
            return results
        with ThreadPoolExecutor(max_workers=rollouts, thread_name_prefix="rollout") as pool:
            # A context can be entered by one thread at a time: a copy for each.
            futures = [
                pool.submit(contextvars.copy_context().run, work, rollout)
                for rollout in range(rollouts)
            ]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                stop.set()  # Ctrl-C here: the rollouts stop at their next step, not at the end
                raise
        return results
