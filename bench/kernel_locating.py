"""How long finding the kernels of a large .cu document takes, as the server pays after an edit.

    python -m bench.kernel_locating --label after [--repeats 25] [--kernels 40 200]

A CPU measurement (tree-sitter and Python) on generated documents of N kernels in the forms real
files use, each also broken as a file being edited is. Each call is timed many times with the
locator's cache bypassed; medians and p90 go to bench/results/kernel-locating-cpu-vm.json under
the label, so one file holds a before and an after."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from bench.common import RESULTS, git_commit
from kernelblaster.atomic_files import write_atomically
from kernelblaster.harness.analysis import cuda_source
from kernelblaster.server.editor import kernel_locator

RESULT = RESULTS / "kernel-locating-cpu-vm.json"


def _kernel_block(i: int) -> str:
    """One kernel with its helpers and launcher, about 25 lines, in one of eight forms."""
    name = f"kernel_{i}"
    body = (
        "  int idx = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  __shared__ float tile[256];\n"
        "  if (idx < n) {\n"
        "    tile[threadIdx.x] = x[idx] * 2.0f;  /* scale { not a brace */\n"
        "  }\n"
        "  __syncthreads();\n"
        "  for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
        "    if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s];\n"
        "    __syncthreads();\n"
        "  }\n"
        '  if (threadIdx.x == 0) { y[blockIdx.x] = tile[0]; printf("%d\\n", idx); }\n'
    )
    params = "(const float* __restrict__ x, float* y, int n)"
    form = i % 8
    if form == 0:
        kernel = f"__global__ void {name}{params} {{\n{body}}}\n"
    elif form == 1:
        kernel = (
            "template <typename T, int BLOCK = 256>\n"
            f"__global__ void __launch_bounds__(BLOCK, 2) {name}(const T* x, T* y, int n) {{\n"
            f"{body}}}\n"
        )
    elif form == 2:
        kernel = f"__global__ void __cluster_dims__(2, 1, 1) {name}{params} {{\n{body}}}\n"
    elif form == 3:
        kernel = f"namespace ns{i} {{\n__global__ void {name}{params} {{\n{body}}}\n}}  // ns\n"
    elif form == 4:
        kernel = (
            f"namespace ns{i} {{ __global__ void {name}{params}; }}\n"
            f"__global__ void ns{i}::{name}{params} {{\n{body}}}\n"
        )
    elif form == 5:
        kernel = (
            f"template <typename T> __global__ void {name}(const T* x, T* y, int n);\n"
            f"template <> __global__ void {name}<float>{params} {{\n{body}}}\n"
        )
    elif form == 6:
        kernel = f'extern "C" __global__ void {name}{params} {{\n{body}}}\n'
    else:
        kernel = (
            f"struct Op{i} {{ __device__ float operator()(float v) const {{ return v; }} }};\n"
            f"static __global__ void {name}{params} {{\n{body}}}\n"
        )
    helper = (
        f"#define SCALE_{i} 2.0f\n"
        f"__device__ inline float helper_{i}(float a) {{ return a * SCALE_{i}; }}\n"
        f"__host__ __device__ float both_{i}(float a) {{ return a + 1.0f; }}\n"
    )
    launcher = (
        f'extern "C" void launch_{i}(const float* x, float* y, int n) {{\n'
        f"  {name}<<<(n + 255) / 256, 256>>>(x, y, n);\n"
        "}\n"
        if form != 5
        else f'extern "C" {{\nvoid launch_{i}(float* y) {{ (void)y; }}\n}}\n'
    )
    comment = (
        f"/* kernel {i}: scales x into y,\n"
        " * then sums each block's tile\n"
        " * (one partial sum per block). */\n"
    )
    return f"{comment}{helper}{kernel}{launcher}\n"


def document(kernels: int) -> str:
    return "#include <cstdio>\n#include <cuda_runtime.h>\n\n" + "".join(
        _kernel_block(i) for i in range(kernels)
    )


def broken_variants(text: str, seed: int = 7) -> dict[str, str]:
    """The document as it is mid-edit, each break placed in the middle of the file."""
    rng = random.Random(seed)
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    closing = next(i for i in range(middle, len(lines)) if lines[i].strip() == "}")
    scattered = text
    for _ in range(40):
        start = rng.randrange(len(scattered))
        scattered = scattered[:start] + scattered[start + rng.randrange(1, 12) :]
    return {
        "clean": text,
        "unclosed-brace": "".join(lines[:closing] + lines[closing + 1 :]),
        "half-typed-line": "".join(
            [*lines[:middle], "  float v = x[idx + (blockDim.x *\n", *lines[middle:]]
        ),
        "truncated": text[: int(len(text) * 0.6)],
        "scattered-deletions": scattered,
    }


def _timed(call: Callable[[], object], repeats: int) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 2),
        "p90_ms": round(samples[int(0.9 * (len(samples) - 1))], 2),
        "min_ms": round(samples[0], 2),
    }


def measure(text: str, repeats: int) -> dict:
    uncached_locate = kernel_locator.locate.__wrapped__  # the server's cache would hide the work
    calls: dict[str, Callable[[], object]] = {
        "parse": lambda: cuda_source.parse(text),
        "global_kernels": lambda: cuda_source.global_kernels(text),
        "extern_c_functions": lambda: cuda_source.extern_c_functions(text),
        "host_function_names": lambda: cuda_source.host_function_names(text),
        "server_locate_uncached": lambda: uncached_locate(text),
    }
    return {
        "lines": text.count("\n") + 1,
        "bytes": len(text.encode("utf-8")),
        "kernels_found": len(cuda_source.global_kernels(text)),
        "extern_c_found": len(cuda_source.extern_c_functions(text)),
        "host_functions_found": len(cuda_source.host_function_names(text)),
        "timings": {name: _timed(call, repeats) for name, call in calls.items()},
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the run's name in the file: before, after")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--kernels", type=int, nargs="+", default=[40, 200])
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()

    load_before = os.getloadavg()
    documents = {}
    for count in args.kernels:
        for variant, text in broken_variants(document(count)).items():
            documents[f"{count}-kernels/{variant}"] = measure(text, args.repeats)
            print(f"{count}-kernels/{variant}", documents[f"{count}-kernels/{variant}"]["timings"])
    run = {
        "commit": git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "repeats": args.repeats,
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "documents": documents,
    }
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update(
        {
            "what": "CPU-only: time to find the kernels of a generated .cu document "
            "(tree-sitter parse + harness.analysis.cuda_source); no GPU or nvcc involved",
            "device": "cpu (shared 2-core development VM)",
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "tree_sitter": metadata.version("tree-sitter"),
            "tree_sitter_cuda": metadata.version("tree-sitter-cuda"),
        }
    )
    result.setdefault("runs", {})[args.label] = run
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(args.out, json.dumps(result, indent=2) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
