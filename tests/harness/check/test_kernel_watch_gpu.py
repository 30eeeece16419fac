"""On a GPU: verification's kernel watch (harness/check/kernel_watch.py) names the kernels a call
launches through CUPTI's launch callbacks, as torch.profiler names them (an elementwise torch
op and a cuBLAS GEMM, and nothing for a call that launches nothing); a call that replays a CUDA
graph, whose kernels the callbacks don't see, is watched through torch.profiler instead, which
names them. The watching runs in a process of its own: once torch.profiler has run, kineto
keeps CUPTI's one callback subscriber, which would change what later tests in this process see.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelblaster.harness.analysis.ptxas import short_name

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SCENARIO = textwrap.dedent(
    """
    import json, sys
    import torch
    from kernelblaster.harness.check.kernel_watch import KernelWatch, through_profiler
    from kernelblaster.settings import Settings

    device = torch.device("cuda", 0)
    x = torch.randn(512, 512, device=device)

    def ops(inputs):
        return [torch.relu(inputs[0]) @ inputs[0]]

    def nothing(inputs):
        return []

    static = [x.clone()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops(static)  # cuBLAS's workspace and handles, before the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops(static)

    def replay(inputs):
        graph.replay()
        return captured

    watch = KernelWatch(Settings(cache_dir=sys.argv[1]))
    seen = {}
    for name, call in [("ops", ops), ("nothing", nothing), ("graph", replay)]:
        kernels = watch.launched(call, [x], device)
        seen[name] = {"kernels": sorted(kernels), "way": watch.way, "why": watch.why_profiler}
    seen["ops_profiler"] = {"kernels": sorted(through_profiler(ops, [x], device))}
    print(json.dumps(seen))
    """
)


def _bare(names: list[str]) -> list[str]:
    return sorted(short_name(name) for name in names)


def test_the_watch_names_the_kernels_torch_profiler_names(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    print(json.dumps(seen, indent=1))
    ops = seen["ops"]
    assert ops["way"] == "cupti", ops["why"]
    # the same kernels; the demanglers differ in spelling ("(anonymous namespace)", "<unnamed>")
    assert _bare(ops["kernels"]) == _bare(seen["ops_profiler"]["kernels"])
    assert len(ops["kernels"]) == len(seen["ops_profiler"]["kernels"])
    assert any("elementwise" in name for name in ops["kernels"])  # torch.relu
    assert any("gemm" in name.lower() for name in ops["kernels"])  # cuBLAS's
    assert seen["nothing"] == {"kernels": [], "way": "cupti", "why": ""}
    graph = seen["graph"]
    assert graph["way"] == "torch.profiler" and "CUDA graph" in graph["why"]
    assert graph["kernels"] == seen["ops_profiler"]["kernels"]  # the graph's, named by kineto
