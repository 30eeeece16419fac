"""How soon a spare worker answers a request that needs torch: started by exec vs forked.

    python -m bench.spare_start [--runs 8]

After one check caches relu's build, `--runs` spares are started by exec, then `--runs` forked by
one zygote, each handed a check at once; records seconds from start to response (without a GPU,
the harness's no-CUDA finding, after the torch import), the CPU count and load. Writes
bench/results/spare-start-<gpu>.json (cpu-<host> without one)."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from bench.common import git_commit, write_result
from kernelblaster.harness.protocol.worker_client import (
    SpareWorkers,
    default_harness_command,
    harness_command,
    run_harness,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.harness.protocol.zygote_client import ForkedProcess
from kernelblaster.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# The worker as default_harness_command() runs it, spelled so that SpareWorkers does not fork it
# from the zygote (it forks only the default command's spares): the exec'd way, and no zygote
# importing torch beside it.
EXEC_COMMAND = [sys.executable, "-m", "kernelblaster.harness.worker.__main__"]


async def _answered_after_start(spares: SpareWorkers, request: WorkerRequest) -> dict:
    """Start a spare, hand it `request` at once; the seconds to its response, and how the
    spare was started."""
    began = time.perf_counter()
    await spares.ready(harness_command(request.settings), 0)
    [spare] = spares.waiting()
    response = await run_harness(request, request.settings, spares=spares)
    seconds = time.perf_counter() - began
    answer = response.error.kind if response.error else "verified and timed"
    forked = isinstance(spare, ForkedProcess)
    return {"seconds": round(seconds, 4), "forked": forked, "answer": answer}


async def measure(runs: int, cache: Path) -> dict:
    settings = Settings(cache_dir=str(cache))
    request = WorkerRequest(task="check", source=str(EXAMPLES / "relu.cu"), settings=settings)
    await run_harness(request, settings)  # the build cached, for every run below
    execd_request = msgspec.structs.replace(
        request, settings=msgspec.structs.replace(settings, worker_command=EXEC_COMMAND)
    )
    execd: list[dict] = []
    for _ in range(runs):
        spares = SpareWorkers(least=1, most=1)
        try:
            execd.append(await _answered_after_start(spares, execd_request))
        finally:
            await spares.close()
    forked: list[dict] = []
    pool = SpareWorkers(least=1, most=1)
    try:
        pool.begin_zygote(default_harness_command())
        while not pool._zygote.usable:  # its import done before the first fork is timed
            await asyncio.sleep(0.1)
            if pool._zygote.ready is not None and pool._zygote.ready.refused:
                raise SystemExit(f"the zygote refused: {pool._zygote.ready.refused}")
        for _ in range(runs):
            forked.append(await _answered_after_start(pool, request))
    finally:
        await pool.close()
    assert not any(run["forked"] for run in execd) and all(run["forked"] for run in forked)
    return {
        "what": "a spare's start to the response of a check request handed to it at once",
        "cpus": os.cpu_count(),
        "load_average_at_start": round(os.getloadavg()[0], 2),
        "commit": git_commit(),
        "exec_d": {"runs": execd, "median_s": statistics.median(r["seconds"] for r in execd)},
        "forked": {"runs": forked, "median_s": statistics.median(r["seconds"] for r in forked)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="spares started each way")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        result = asyncio.run(measure(args.runs, Path(scratch) / "cache"))
    path = write_result("spare-start", result)
    print(
        f"exec'd {result['exec_d']['median_s']:.3f} s, forked {result['forked']['median_s']:.3f} s"
        f" (median of {args.runs}) -> {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
