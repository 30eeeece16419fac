"""The server's log line for each run that reached its timing (server/pipeline.py TIMED_LINE)
and the editing-rhythm bench's reading of it (bench/latency.py worker_runs), which attributes
each save's seconds (a young spare, a reference side made for another file, ...)."""

from __future__ import annotations

import logging

from learning.bench_scripts import load_script

from kernelblaster.server import pipeline

latency = load_script("bench/latency.py")


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
            pipeline.log.info(pipeline.TIMED_LINE, name, build, phases)
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
