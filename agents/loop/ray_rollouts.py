"""Rollouts as Ray tasks (`optimize --ray ADDRESS`), one GPU each, for runs larger than one host. A
task rebuilds what can't travel: the LLM client (its key from the Ray worker's environment: keys
never go through Ray) and the KB at the driver's location, so every attempt lands in one KB (an
SQLite file only on the driver's host). Every node needs `kernelblaster[ray]`."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.agents.loop.plan import (
    Evaluate,
    Lower,
    RolloutPlan,
    RolloutResult,
    RolloutServices,
    RunRollouts,
)
from kernelblaster.agents.loop.rollout import run_rollout
from kernelblaster.harness.protocol.worker_client import keep_spare_workers
from kernelblaster.kb.fallback import open_or_fallback
from kernelblaster.kb_location import is_postgres_url

WAIT_S = 1.0  # how often the driver looks at `cancelled` while the tasks run


@dataclass(frozen=True)
class RayRollout:
    """Everything a rollout task needs, sent to the Ray worker by value."""

    plan: RolloutPlan
    kb_location: Path | str
    driver_host: str
    llm: LlmConfig
    evaluate: Evaluate
    lower: Lower


def on_ray(address: str) -> RunRollouts:
    """Run each rollout as a Ray task needing one GPU, on the cluster at `address` ("auto",
    "HOST:PORT", or "ray://HOST:PORT" through Ray Client)."""

    def run(plan: RolloutPlan, rollouts: int, services: RolloutServices) -> list[RolloutResult]:
        import ray

        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        task = ray.remote(num_gpus=1, max_retries=0)(_rollout_task)
        job = RayRollout(
            plan=plan.on_gpu(0),
            kb_location=services.kb.path,
            driver_host=socket.gethostname(),
            llm=services.client.config,
            evaluate=services.evaluate,
            lower=services.lower,
        )
        running = {task.remote(job, rollout): rollout for rollout in range(rollouts)}
        results: list[RolloutResult] = []
        while running:
            if services.cancelled():
                _cancel(running)
                results += [RolloutResult(rollout=r, cancelled=True) for r in running.values()]
                break
            done, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_S)
            for ref in done:
                rollout = running.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    result = RolloutResult(
                        rollout=rollout, error=f"Ray task of rollout {rollout + 1} failed: {exc}"
                    )
                results.append(result)
                _report(result, services)
                if result.error:  # the LLM or the harness is gone: the others would fail too
                    _cancel(running)
                    running.clear()
        return results

    return run


def _report(result: RolloutResult, services: RolloutServices) -> None:
    """Report a finished task's steps (its successful steps are its verified candidates)."""
    verified_ms = iter(point.time_ms for point in result.verified)
    for step in result.steps:
        services.report(
            f"rollout {result.rollout + 1} step {step.depth + 1} (Ray): {step.technique} "
            f"predicted {step.predicted_speedup:.2f}x, {step.outcome}",
            next(verified_ms) if step.outcome == "success" else None,
        )


def _cancel(running: dict) -> None:
    import ray

    for ref in running:
        ray.cancel(ref, force=True)


def _rollout_task(job: RayRollout, rollout: int) -> RolloutResult:
    here = socket.gethostname()
    if not is_postgres_url(job.kb_location) and here != job.driver_host:
        return RolloutResult(
            rollout=rollout,
            error=f"the KB is the file {job.kb_location} on {job.driver_host}, which this rollout "
            f"(on {here}) can't write: use a team KB (a postgresql:// URL in kbPath or "
            "KERNELBLASTER_KB) for rollouts on several hosts",
        )
    kb, _ = open_or_fallback(job.kb_location)
    with kb, keep_spare_workers():  # the rollout's steps start in prewarmed workers
        services = RolloutServices(
            client=LlmClient(job.llm),
            kb=kb,
            evaluate=job.evaluate,
            lower=job.lower,
            cancelled=lambda: False,  # the driver cancels a task by ending it
            report=lambda *_: None,  # the driver reports the steps when the task returns
        )
        return run_rollout(job.plan, rollout, services)
