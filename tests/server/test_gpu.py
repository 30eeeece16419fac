"""On a GPU machine: the server, driven by an LSP client, profiles a real example on open with
the real harness worker and publishes state and line diagnostics from real ncu data. The
published diagnostics are written to $KERNELBLASTER_GPU_DIAGNOSTICS (if set) for the record."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from lsprotocol import types

from tests.conftest import REPO
from tests.server.conftest import by_code, open_document, start, wait_until


@pytest.mark.gpu
async def test_profiles_softmax_on_open_and_publishes_real_diagnostics(client, workspace):
    for name in ("softmax.cu", "softmax.py"):
        shutil.copyfile(REPO / "examples" / name, workspace.root / name)
    await start(client, workspace, workerCommand=None)  # the real worker: build, verify, time, ncu
    uri = open_document(client, workspace.root / "softmax.cu")
    await wait_until(
        lambda: (
            by_code(client.diagnostics.get(uri, []), "state")
            or by_code(client.diagnostics.get(uri, []), "setup")
            or by_code(client.diagnostics.get(uri, []), "run")
        ),
        timeout=600,
    )
    diagnostics = client.diagnostics[uri]
    if out := os.environ.get("KERNELBLASTER_GPU_DIAGNOSTICS"):
        with open(out, "w") as handle:
            json.dump(
                [client.protocol._converter.unstructure(d) for d in diagnostics], handle, indent=1
            )
    (state, *_) = by_code(diagnostics, "state")
    assert state.message.startswith("softmax")
    assert " ms" in state.message and "vs eager" in state.message
    assert [d for d in diagnostics if d.range.start.line != state.range.start.line], diagnostics
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]


@pytest.mark.gpu
async def test_timing_is_published_before_the_state_on_a_gpu(client, workspace):
    """The real worker sends its verified timing before ncu starts: the client holds the
    `timing` diagnostic while no `state` diagnostic exists yet (ncu takes seconds), then both;
    the PyTorch baselines, not cached on this first run, arrive with the state."""
    for name in ("relu.cu", "relu.py"):
        shutil.copyfile(REPO / "examples" / name, workspace.root / name)
    await start(client, workspace, workerCommand=None, cacheDir=str(workspace.root / "cache"))
    uri = open_document(client, workspace.root / "relu.cu")
    seen: list[tuple[str, ...]] = []

    def codes() -> tuple[str, ...]:
        current = tuple(sorted({d.code for d in client.diagnostics.get(uri, [])}))
        if not seen or seen[-1] != current:
            seen.append(current)
        return current

    await wait_until(lambda: "state" in codes() or "run" in codes() or "setup" in codes(), 600)
    diagnostics = client.diagnostics[uri]
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]
    first_timing = next(i for i, c in enumerate(seen) if "timing" in c)
    assert "state" not in seen[first_timing], seen  # the timing came first
    (timing,) = by_code(diagnostics, "timing")
    assert timing.message.startswith("verified on ") and "vs eager" in timing.message
    statuses = [s.message for s in client.job_status]
    verified = next(i for i, m in enumerate(statuses) if "verified on " in m)
    assert any("ncu" in m for m in statuses[verified:]), statuses
