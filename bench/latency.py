"""Wall time of each harness phase (build, verify, time) for every example, cold and warm cache,
measured through the real worker process, as the language server runs it on save.

    python bench/latency.py [--examples relu softmax ...]

Writes bench/results/latency-<gpu>.json. Cold: an empty cache (nvcc build, and the eager /
torch.compile baselines measured); warm: the same inputs again (build cached, baselines
cached), each on a fresh worker process as the CLI runs it; "warm on a spare worker": the
language server's path, a worker started (torch imported, CUDA context created) while the
editor was idle. The torch-extension example is also rebuilt after a one-line edit, the case
that is bounded by compiling torch's headers."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result

from kernelblaster.harness.worker_client import SpareWorkers, run_harness, run_harness_sync
from kernelblaster.harness.worker_protocol import WorkerRequest
from kernelblaster.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEFAULT = ["relu", "row_sum", "softmax", "matmul", "bias_gelu_scale", "saxpy_program"]


def measure(source: Path, settings: Settings) -> dict:
    request = WorkerRequest(
        task="check", source=str(source), settings=msgspec.to_builtins(settings)
    )
    began = time.perf_counter()
    response = run_harness_sync(request, settings)
    wall = time.perf_counter() - began
    check = response.check
    build = response.build
    return {
        "wall_s": round(wall, 3),
        "build_s": round(build.seconds, 3) if build else None,
        "build_cached": build.cached if build else None,
        "phases_s": check.phase_seconds if check else {},
        "verified": bool(check and check.verify and check.verify.ok),
        "kernel_ms": check.timing.median_ms if check and check.timing else None,
        "speedup_vs_eager": check.speedup_vs_eager if check else None,
        "speedup_vs_compile": check.speedup_vs_compile if check else None,
        "error": f"{response.error.kind}: {response.error.message}" if response.error else None,
    }


async def _spare_save(request: WorkerRequest, settings: Settings) -> float:
    """Wall time of a save as the language server runs it: on a spare worker that started (and
    imported torch, and created its CUDA context) while the editor was idle."""
    spares = SpareWorkers()
    try:
        await run_harness(request, settings, spares=spares)
        await asyncio.sleep(8)  # the editor is idle; the spare warms up
        began = time.perf_counter()
        await run_harness(request, settings, spares=spares)
        return round(time.perf_counter() - began, 3)
    finally:
        await spares.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.examples:
            work = Path(scratch) / name
            work.mkdir()
            for file in EXAMPLES.glob(f"{name}.*"):
                shutil.copy(file, work / file.name)
            source = work / f"{name}.cu"
            settings = Settings(cache_dir=str(work / "cache"))
            cold = measure(source, settings)
            warm = measure(source, settings)
            request = WorkerRequest(
                task="check", source=str(source), settings=msgspec.to_builtins(settings)
            )
            spare_s = asyncio.run(_spare_save(request, settings))
            entry = {"cold": cold, "warm": warm, "warm_on_spare_worker_wall_s": spare_s}
            if name == "bias_gelu_scale":
                text = source.read_text()
                source.write_text(text.replace("0.5f, n);", "0.5f * 1.0f, n);"))
                entry["after_one_line_edit"] = measure(source, settings)
            results[name] = entry
            print(
                f"{name:16} cold {cold['wall_s']:7.2f}s  warm {warm['wall_s']:6.2f}s  "
                f"verified={warm['verified']} err={warm['error']}",
                flush=True,
            )
    path = write_result("latency", {"examples": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
