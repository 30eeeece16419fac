"""Per-save deltas and the timing history through the real language server: the replay worker
answers each save with the softmax fixture's real H200 profile and a timing the test sets, so
the expected factors are exact. The history is kept beside the results cache, per GPU and
reference; a changed reference starts a new one."""

from __future__ import annotations

import json

import msgspec
from lsprotocol import types

from bench.lsp_session import wait_until
from kernelblaster.harness.protocol.records import Timing, VerifyResult
from kernelblaster.server.results.cache import ResultCache
from kernelblaster.server.results.history import SaveHistory
from tests.server.conftest import (
    by_code,
    edit_and_save,
    open_document,
    softmax_response,
    softmax_source,
    start,
)


def timed_softmax(source, median_ms: float, spread: float = 0.01):
    """The softmax fixture's verified response, timed at `median_ms` (±`spread` for p20/p80)."""
    response = softmax_response(source)
    response.check.verify = VerifyResult(ok=True, trials=3, atol=1e-4, rtol=1e-4, seeds=[1, 2, 3])
    response.check.timing = Timing(
        median_ms=median_ms,
        min_ms=median_ms * (1 - 2 * spread),
        max_ms=median_ms * (1 + 2 * spread),
        p20_ms=median_ms * (1 - spread),
        p80_ms=median_ms * (1 + spread),
        repetitions=50,
    )
    return response


def _timing(client, uri: str) -> str | None:
    found = by_code(client.diagnostics.get(uri, []), "timing")
    return found[0].message if found else None


def _done(client) -> int:
    """Jobs that ended with a result (a save cancels a job the watcher started: not counted)."""
    return len([s for s in client.job_status if s.phase == "done"])


async def _saved(client, uri, source, text, version, workspace, median_ms) -> types.Diagnostic:
    """Save `text` answered with a run timed at `median_ms`; its timing diagnostic once the job
    has ended."""
    workspace.record("harness", timed_softmax(source, median_ms))
    done = _done(client)
    edit_and_save(client, uri, source, text, version)
    await wait_until(lambda: _done(client) > done)
    (timing,) = by_code(client.diagnostics[uri], "timing")
    return timing


async def test_saves_show_the_change_from_the_previous_save_and_since_opened(client, workspace):
    source = workspace.add("softmax.cu", softmax_source())
    reference = workspace.add("softmax.py", "# the reference\n")
    workspace.record("harness", timed_softmax(source, 0.400))
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_until(lambda: _timing(client, uri))
    await wait_until(lambda: client.job_status and not client.job_status[-1].running)
    first = _timing(client, uri)
    assert first is not None and "previous save" not in first  # nothing earlier yet

    text = source.read_text()
    faster = await _saved(client, uri, source, text + "// v2\n", 2, workspace, 0.250)
    assert faster.message.startswith(
        "0.25 ms per call (median of 50 runs) — 1.60× faster than the previous save, 1.60× "
        "faster since opened; verified on 3"
    ), faster.message
    assert faster.severity == types.DiagnosticSeverity.Information
    # the status bar's text leads with the change; its tooltip has the same per-call time
    ended = client.job_status[-1]
    assert ended.headline == "softmax.cu 1.60× faster · memory-bound", ended
    assert ended.message.startswith(
        "0.25 ms per call (median of 50 runs) — 1.60× faster than the previous save, 1.60× "
        "faster since opened; "
    ), ended.message
    assert "ncu kernel duration" in ended.message and "softmax.cu" not in ended.message

    slower = await _saved(client, uri, source, text + "// v3\n", 3, workspace, 0.300)
    assert slower.message.startswith(
        "0.3 ms per call (median of 50 runs) — regression: 1.20× slower than the previous save, "
        "1.33× faster since opened"
    ), slower.message
    assert slower.severity == types.DiagnosticSeverity.Warning

    # Within the runs' spread: the same, not a regression.
    same = await _saved(client, uri, source, text + "// v4\n", 4, workspace, 0.3015)
    assert "same as the previous save (within noise)" in same.message, same.message
    assert same.severity == types.DiagnosticSeverity.Information

    # The hover says it too, with the saves as a sparkline.
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=4, character=20),
        )
    )
    assert hover is not None
    assert "1.33× faster since opened" in hover.contents.value
    assert "Last 4 saves (median per call, oldest first)" in hover.contents.value

    # Kept with the results cache: each save's time and its kernel's state.
    history = json.loads(SaveHistory(ResultCache()).file_for(source).read_bytes())
    assert history["gpu"] == "NVIDIA H200"
    assert [round(p["median_ms"], 4) for p in history["points"]] == [0.4, 0.25, 0.3, 0.3015]
    kernel = history["points"][-1]["kernels"]["softmax_rowthread"]
    assert kernel["state"] and kernel["summary"] and kernel["flops_per_s"] > 0

    # A changed reference starts a new history: no delta against the old one.
    reference.write_text("# the reference, changed\n")
    changed = await _saved(client, uri, source, text + "// v5\n", 5, workspace, 0.100)
    assert "previous save" not in changed.message and "since opened" not in changed.message
    history = json.loads(SaveHistory(ResultCache()).file_for(source).read_bytes())
    assert [p["median_ms"] for p in history["points"]] == [0.1]


async def test_another_gpu_starts_a_new_history(client, workspace):
    source = workspace.add("softmax.cu", softmax_source())
    workspace.record("harness", timed_softmax(source, 0.400))
    await start(client, workspace)
    uri = open_document(client, source)
    await wait_until(lambda: client.job_status and not client.job_status[-1].running)
    other = timed_softmax(source, 0.2)
    other.check.gpu = "NVIDIA H100 80GB HBM3"
    workspace.record("harness", other)
    done = _done(client)
    edit_and_save(client, uri, source, source.read_text() + "// v2\n", 2)
    await wait_until(lambda: _done(client) > done)
    message = _timing(client, uri)
    assert message is not None and "faster" not in message and "slower" not in message
    history = msgspec.json.decode(SaveHistory(ResultCache()).file_for(source).read_bytes())
    assert history["gpu"] == "NVIDIA H100 80GB HBM3" and len(history["points"]) == 1
