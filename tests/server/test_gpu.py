"""On a GPU machine: the server, driven by an LSP client, profiles a real example on open with
the real harness worker and publishes state and line diagnostics from real ncu data. The
published diagnostics are written to $KERNELBLASTER_GPU_DIAGNOSTICS (if set) for the record."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from lsprotocol import types

from bench.lsp_session import wait_until
from tests.conftest import REPO
from tests.server.conftest import by_code, open_document, start


@pytest.mark.gpu
async def test_profiles_softmax_on_open_and_publishes_real_diagnostics(client, workspace):
    for name in ("softmax.cu", "softmax.py"):
        shutil.copyfile(REPO / "examples" / name, workspace.root / name)
    await start(client, workspace, workerCommand=None)  # the real worker: build, verify, time, ncu
    uri = open_document(client, workspace.root / "softmax.cu")
    # The state comes first (the worker's own counters); ncu's source lines, and the PyTorch
    # baselines where they were not cached, are published with it when the job ends.
    await wait_until(lambda: [s for s in client.job_status if not s.running], timeout=600)
    diagnostics = client.diagnostics[uri]
    if out := os.environ.get("KERNELBLASTER_GPU_DIAGNOSTICS"):
        with open(out, "w") as handle:
            json.dump(
                [client.protocol._converter.unstructure(d) for d in diagnostics], handle, indent=1
            )
    (state, *_) = by_code(diagnostics, "state")
    assert state.message.startswith("softmax")
    assert " ms" in state.message and "vs eager" in state.message
    lines = [d for d in diagnostics if d.range.start.line != state.range.start.line]
    assert lines, [(d.code, d.message) for d in diagnostics]
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]


@pytest.mark.gpu
async def test_timing_is_published_before_the_state_on_a_gpu(client, workspace):
    """The real worker sends its verified timing before the profile starts: the client holds
    the `timing` diagnostic while no `state` diagnostic exists yet, then both; the PyTorch
    baselines, not cached on this first run (torch.compile takes seconds), come after the
    state, not before it."""
    for name in ("relu.cu", "relu.py"):
        shutil.copyfile(REPO / "examples" / name, workspace.root / name)
    await start(client, workspace, workerCommand=None, cacheDir=str(workspace.root / "cache"))
    uri = open_document(client, workspace.root / "relu.cu")
    seen: list[tuple[str, ...]] = []

    def codes() -> tuple[str, ...]:
        diagnostics = client.diagnostics.get(uri, [])
        current = tuple(sorted({d.code for d in diagnostics}))
        if _with_baselines(diagnostics, "timing"):
            current += ("baselines",)
        if not seen or seen[-1] != current:
            seen.append(current)
        return current

    await wait_until(lambda: "baselines" in codes() or "run" in codes() or "setup" in codes(), 600)
    diagnostics = client.diagnostics[uri]
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]
    first_timing = next(i for i, c in enumerate(seen) if "timing" in c)
    assert "state" not in seen[first_timing], seen  # the timing came first
    first_state = next(i for i, c in enumerate(seen) if "state" in c)
    assert "baselines" not in seen[first_state], seen  # the state did not wait for them
    (timing,) = by_code(diagnostics, "timing")
    assert timing.message.startswith("verified on ") and "vs eager" in timing.message
    statuses = [s.message for s in client.job_status]
    verified = next(i for i, m in enumerate(statuses) if "verified on " in m)
    assert any("ncu" in m for m in statuses[verified:]), statuses


def _with_baselines(diagnostics, code: str) -> list[types.Diagnostic]:
    """The `code` diagnostics that show the PyTorch baselines' speedups."""
    return [d for d in by_code(diagnostics, code) if "vs eager" in d.message]


@pytest.mark.gpu
async def test_a_second_file_opened_during_anothers_background_work_goes_first_on_a_gpu(
    client, workspace
):
    """relu.cu's job is in its background work (ncu's pass, then its baselines, not cached)
    when softmax.cu is opened: softmax's timing and state come while relu's job is still not
    done (it was stopped, not finished); relu's job then resumes and publishes its full result
    (ncu's source lines, the baselines), as does softmax's."""
    for name in ("relu.cu", "relu.py", "softmax.cu", "softmax.py"):
        shutil.copyfile(REPO / "examples" / name, workspace.root / name)
    await start(client, workspace, workerCommand=None, cacheDir=str(workspace.root / "cache"))
    relu = open_document(client, workspace.root / "relu.cu")

    def relu_says(words: str) -> bool:
        return any(s.uri == relu and words in s.message for s in client.job_status)

    def done(uri: str) -> bool:
        return any(s.uri == uri and not s.running for s in client.job_status)

    await wait_until(lambda: relu_says("profiling with ncu") or done(relu), timeout=300)
    if done(relu):
        pytest.fail("relu's job ended before its background work was seen: nothing to stop")
    softmax = open_document(client, workspace.root / "softmax.cu")
    await wait_until(lambda: by_code(client.diagnostics.get(softmax, []), "state"), timeout=120)
    ended = {s.uri for s in client.job_status if not s.running}
    assert relu not in ended  # softmax's interactive work did not wait for relu's baselines
    assert relu_says("profile paused: another file's save goes first")
    await wait_until(lambda: done(relu) and done(softmax), timeout=600)
    finals = {s.uri: s.phase for s in client.job_status if not s.running}
    assert finals == {relu: "done", softmax: "done"}
    for uri in (relu, softmax):
        diagnostics = client.diagnostics[uri]
        assert _with_baselines(diagnostics, "timing"), [d.message for d in diagnostics]
        assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]
        assert not [d for d in by_code(diagnostics, "state") if "earlier version" in d.message]
