"""The server's log record for each run that reached its timing (server/pipeline/save.py
TimedRun) and the editing-rhythm bench's reading of it (bench/latency.py worker_runs), which
attributes each save's seconds (a young spare, a reference side made for another file, ...); and its
count of how the spares taken were started (bench/latency.py spares_taken)."""

from __future__ import annotations

import logging
import sys

from bench import latency
from bench.lsp_session import wait_until
from kernelblaster.harness.protocol import worker_client
from kernelblaster.harness.protocol.worker_client import SpareWorkers
from kernelblaster.server.pipeline import save as pipeline


def test_the_bench_reads_each_runs_phases_back_from_the_servers_log(tmp_path):
    log = tmp_path / "server.log"
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    pipeline.log.addHandler(handler)
    pipeline.log.setLevel(logging.INFO)
    try:
        for name, build, phases in [
            ("relu.cu", "built", {"reference_after_build": 2.3, "spare_age": 0.0}),
            ("softmax.cu", "built", {"clean_reference_wait": 4.26}),
            ("relu.cu", "cached", {"reference_wait": 2.5, "spare_age": 1.2, "verify": 0.2}),
        ]:
            pipeline.log_timed(pipeline.TimedRun(file=name, build=build, phases_s=phases))
        pipeline.log.info("relu.cu: background work stopped for another file's interactive work")
    finally:
        pipeline.log.removeHandler(handler)
        handler.close()
    assert latency.worker_runs(log, "relu") == [
        {"build": "built", "phases_s": {"reference_after_build": 2.3, "spare_age": 0.0}},
        {"build": "cached", "phases_s": {"reference_wait": 2.5, "spare_age": 1.2, "verify": 0.2}},
    ]
    assert latency.worker_runs(log, "softmax") == [
        {"build": "built", "phases_s": {"clean_reference_wait": 4.26}}
    ]
    assert latency.worker_runs(log, "matmul") == []


async def test_the_bench_counts_how_the_spares_taken_were_started(tmp_path):
    """Each spare a request takes is logged with how it was started; the bench counts them, so
    a run's result says whether its saves got spares forked by the zygote."""
    log = tmp_path / "server.log"
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    worker_client._log.addHandler(handler)
    worker_client._log.setLevel(logging.INFO)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    pools = [SpareWorkers(), SpareWorkers(prewarm=False), SpareWorkers()]
    try:
        prewarmed, builds, zygote_backed = pools
        for pool, command in [(prewarmed, sleeper), (builds, sleeper)]:
            await pool.ready(command)
            worker_client.kill_worker(await pool.take(command))
        default = worker_client.default_harness_command()
        await zygote_backed.ready(default)  # exec'd: the zygote is importing torch meanwhile
        await wait_until(lambda: zygote_backed._zygote.usable, timeout=60)
        worker_client.kill_worker(await zygote_backed.take(default))
        await zygote_backed.ready(default)  # forked now
        worker_client.kill_worker(await zygote_backed.take(default))
    finally:
        worker_client._log.removeHandler(handler)
        handler.close()
        for pool in pools:
            await pool.close()
    assert latency.spares_taken(log) == {
        "exec'd": 2,
        "exec'd for builds": 1,
        "forked by the zygote": 1,
    }
