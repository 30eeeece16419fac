"""GPU memory `check` holds on KernelBench problems at their real sizes (issue 32).

    python -m bench.memory [--problems 19_ReLU 23_Softmax 47_Sum_reduction_over_a_dimension]

Published level-1 problems (6.4-8.6 GB inputs) with honest plain-CUDA solutions, checked as
`kernelblaster check` does. `peak_bytes`: the most the worker and its clean reference process
held at once, by nvidia-smi's per-process accounting sampled every ~50 ms (else the device's used
memory, `accounting` says which), also per phase; `footprint_bytes`: one input set and its
outputs. Goal: peak <= 3 x footprint + 2 GB; exits 1 if a check failed or missed it. Writes
bench/results/memory-<gpu>.json. Run it with nothing else on the GPU."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import first_visible_gpu, write_result
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerProgress, WorkerRequest
from kernelblaster.settings import load_settings

ANSWERS = Path(__file__).resolve().parent / "kernelbench" / "answers"
GB = 10**9
MIB = 1 << 20

_ELEMENTWISE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {op}


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
"""

_SUM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 128
dim1 = 4096
dim2 = 4095
reduce_dim = 1


def get_inputs():
    x = torch.rand(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
"""

_SUM_CU = r"""// Sum over dim 1 of a batch_size x dim1 x dim2 tensor (keepdim): one thread per
// output element, reading down its column (coalesced across the threads of a warp).
#include <cuda_runtime.h>

__global__ void sum_dim1_kernel(const float* x, float* out, int batch, int dim1, int dim2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)batch * dim2) return;
    size_t b = i / dim2, c = i % dim2;
    const float* column = x + b * (size_t)dim1 * dim2 + c;
    float s = 0.0f;
    for (int r = 0; r < dim1; ++r) s += column[(size_t)r * dim2];
    out[i] = s;
}

extern "C" void sum_dim1(const float* x, float* out, int batch_size, int dim1, int dim2,
                         cudaStream_t stream) {
    size_t n = (size_t)batch_size * dim2;
    sum_dim1_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, out, batch_size, dim1,
                                                                     dim2);
}
"""


@dataclass(frozen=True)
class Problem:
    name: str
    reference: str
    solution: str
    input_elements: int
    output_elements: int

    @property
    def footprint_bytes(self) -> int:
        return 4 * (self.input_elements + self.output_elements)


PROBLEMS = [
    Problem(
        "19_ReLU",
        _ELEMENTWISE.format(op="torch.relu(x)"),
        (ANSWERS / "19_ReLU.fast.cu").read_text(),
        4096 * 393216,
        4096 * 393216,
    ),
    Problem(
        "23_Softmax",
        _ELEMENTWISE.format(op="torch.softmax(x, dim=1)"),
        (ANSWERS / "23_Softmax.fast.cu").read_text(),
        4096 * 393216,
        4096 * 393216,
    ),
    Problem("47_Sum_reduction_over_a_dimension", _SUM, _SUM_CU, 128 * 4096 * 4095, 128 * 4095),
]


def _smi(query: str, fields: str) -> list[list[str]]:
    done = subprocess.run(
        [
            "nvidia-smi",
            f"--query-{query}={fields}",
            "--format=csv,noheader,nounits",
            "-i",
            first_visible_gpu(),
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines() if line]


def _device_used_bytes() -> int:
    return int(_smi("gpu", "memory.used")[0][0]) * MIB


@dataclass(frozen=True)
class Sample:
    """One poll: when (perf_counter seconds), each compute process's used memory, the device's."""

    at: float
    by_pid: dict[int, int]
    device: int


def _parent_pid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # ended, or in another PID namespace
        return None
    return next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), None
    )


def _role(pid: int, listed: set[int]) -> str:
    """The check's processes: its worker, and the worker's child (the clean reference process)."""
    return "clean_reference" if _parent_pid(pid) in listed else "worker"


def peaks_by_phase(
    samples: list[Sample], marks: list[tuple[float, str]], idle: int, roles: dict[int, str]
) -> dict[str, dict[str, int]]:
    """Per phase (the worker's last progress message before a sample; "starting" before the
    first), the most each measure held: the processes' sum, the device's used memory less
    `idle`, and each process by its role. Progress arrives through the worker's pipe a few
    milliseconds after the phase it names began, so a sample that close to a boundary may be
    counted in the phase before."""
    ordered = sorted(marks)
    peaks: dict[str, dict[str, int]] = {}
    for sample in samples:
        label = "starting"
        for at, name in ordered:
            if at > sample.at:
                break
            label = name
        phase = peaks.setdefault(label, {"processes": 0, "device": 0})
        phase["processes"] = max(phase["processes"], sum(sample.by_pid.values()))
        phase["device"] = max(phase["device"], sample.device - idle)
        for pid, used in sample.by_pid.items():
            role = roles.get(pid, f"pid {pid}")
            phase[role] = max(phase.get(role, 0), used)
    return peaks


class Sampler:
    """Polls the driver's per-process and device memory while a check runs, time-stamped so
    that each sample can be put in the phase the worker was in."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.marks: list[tuple[float, str]] = []
        self.roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_processes(self) -> int:
        return max((sum(s.by_pid.values()) for s in self.samples), default=0)

    @property
    def peak_device(self) -> int:
        return max((s.device for s in self.samples), default=0)

    def mark(self, progress: WorkerProgress) -> None:
        """The worker's progress message: a phase begins (called from the client's thread)."""
        self.marks.append((time.perf_counter(), f"{progress.phase}: {progress.message}"))

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.perf_counter()
            apps = _smi("compute-apps", "pid,used_memory")
            by_pid = {int(pid): int(used) * MIB for pid, used in apps if used.isdigit()}
            for pid in by_pid.keys() - self.roles.keys():
                self.roles[pid] = _role(pid, set(by_pid))
            self.samples.append(Sample(at, by_pid, _device_used_bytes()))
            self._stop.wait(0.02)


def run(problem: Problem, scratch: Path) -> dict:
    folder = scratch / problem.name
    folder.mkdir(parents=True)
    (folder / f"{problem.name}.py").write_text(problem.reference)
    source = folder / f"{problem.name}.cu"
    source.write_text(problem.solution)
    settings = load_settings(source, environ={}).merged(
        {"cache_dir": str(scratch / "cache"), "run_timeout_s": 300.0}
    )
    idle = _device_used_bytes()
    began = time.perf_counter()
    with Sampler() as sampler:
        response = run_harness_sync(
            WorkerRequest(task="check", source=str(source), settings=settings),
            settings,
            on_progress=sampler.mark,
        )
    check = response.check
    verify = check.verify if check else None
    footprint = problem.footprint_bytes
    by_process = sampler.peak_processes > 0
    peak = sampler.peak_processes if by_process else sampler.peak_device - idle
    entry = {
        "name": problem.name,
        "footprint_bytes": footprint,
        "peak_bytes": peak,
        "accounting": "processes" if by_process else "device",
        "goal_bytes": 3 * footprint + 2 * GB,
        "within_goal": peak <= 3 * footprint + 2 * GB,
        "device_used_peak_bytes": sampler.peak_device - idle,
        "samples": len(sampler.samples),
        # where the peak happens: per phase (the worker's progress messages), GB-exact bytes
        "peak_bytes_by_phase": peaks_by_phase(sampler.samples, sampler.marks, idle, sampler.roles),
        "verified": bool(verify and verify.ok),
        "error": response.error.message if response.error else None,
        "verify_message": verify.message if verify else None,
        "median_ms": check.timing.median_ms if check and check.timing else None,
        "phase_seconds": check.phase_seconds if check else {},
        "seconds": round(time.perf_counter() - began, 1),
    }
    print(
        f"{problem.name:40s} footprint {footprint / GB:6.2f} GB  peak "
        f"{entry['peak_bytes'] / GB:6.2f} GB  goal {entry['goal_bytes'] / GB:6.2f} GB  "
        f"verified {entry['verified']}"
        f"  {entry['seconds']} s  {entry['error'] or ''}",
        flush=True,
    )
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="*", help="only these problem names")
    args = parser.parse_args()
    chosen = [p for p in PROBLEMS if not args.problems or p.name in args.problems]
    cases: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kb-memory-") as scratch:
        for problem in chosen:
            cases.append(run(problem, Path(scratch)))
            path = write_result("memory", {"cases": cases})  # a run cut short keeps its cases
    print(f"wrote {path}")
    for case in cases:
        print(case["name"])
        for phase, peaks in case["peak_bytes_by_phase"].items():
            held = "  ".join(f"{k} {v / GB:6.2f}" for k, v in peaks.items())
            print(f"  {phase[:60]:60s} {held}")
    return 0 if all(c["verified"] and c["within_goal"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
