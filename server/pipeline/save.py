"""The save pipeline of one file: run the harness worker (build → verify → time → profile →
classify), rank its optimizations in the KB, cache the result, and publish
diagnostics. Also how cached results are shown again when a file is opened."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec
from lsprotocol import types

from kernelblaster.harness.analysis.cuda_source import read_source
from kernelblaster.harness.protocol.records import ProfileDepth
from kernelblaster.harness.protocol.worker_client import run_harness
from kernelblaster.harness.protocol.worker_protocol import (
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.server.editor.documents import is_header, text_hash, to_client_range
from kernelblaster.server.editor.kernel_locator import locate
from kernelblaster.server.editor.progress import JobReporter
from kernelblaster.server.editor.trust import UNTRUSTED_DIAGNOSTIC, UNTRUSTED_MESSAGE
from kernelblaster.server.results.cache import FileResult, new_result
from kernelblaster.server.session.jobs import Slot
from kernelblaster.server.views import diagnostics, formatting
from kernelblaster.server.views.job_summary import job_summary

if TYPE_CHECKING:
    from kernelblaster.server.session.language_server import KernelBlasterServer

log = logging.getLogger(__name__)
TIMED_RUN = "TimedRun "  # a log message that starts so is the record as JSON


class TimedRun(msgspec.Struct, kw_only=True, frozen=True):
    """Logged (INFO) once per run that reached its timing, so that where each save's seconds
    went can be read back from the server's log (`timed_runs`; docs/protocol.md, "Log
    records"): the file, whether its build was a cache hit, and the worker's phase seconds
    (CheckResult.phase_seconds)."""

    file: str
    build: Literal["cached", "built"]
    phases_s: dict[str, float]


def log_timed(record: TimedRun) -> None:
    log.info("%s%s", TIMED_RUN, msgspec.json.encode(record).decode())


def timed_runs(lines: Iterable[str]) -> list[TimedRun]:
    """The TimedRun records of a server log's lines, in order."""
    decoder = msgspec.json.Decoder(TimedRun)
    found = (_TIMED_RUN_LINE.search(line) for line in lines)
    return [decoder.decode(match[1]) for match in found if match]


_TIMED_RUN_LINE = re.compile(rf"(?:^|\s){re.escape(TIMED_RUN)}(\{{.*\}})\s*$")


def schedule(
    ls: KernelBlasterServer,
    path: Path,
    depth: ProfileDepth | None = None,
    *,
    debounce: bool = True,
) -> None:
    """(Re)start the pipeline for `path`, cancelling the file's running job: debounced, or at
    once (`debounce=False`) for a save, an open or a command."""
    if not ls.trust.trusted:
        explain_untrusted(ls)
        return
    ls.jobs.submit(str(path), lambda: run(ls, path, depth), debounce=debounce)


def run_if_stale(ls: KernelBlasterServer, path: Path, text: str) -> None:
    """Run `path` unless it is a header or its cached result is of `text` (opened, or trusted)."""
    result = ls.cache.get(path)
    if not is_header(path) and (result is None or result.text_hash != text_hash(text)):
        schedule(ls, path, debounce=False)


def explain_untrusted(ls: KernelBlasterServer) -> None:
    if ls.trust.explanation_due():
        ls.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Warning, message=UNTRUSTED_MESSAGE)
        )


async def run(ls: KernelBlasterServer, path: Path, depth: ProfileDepth | None) -> None:
    await ls.ready.wait()
    uri = ls.documents.uri_for(path)
    reporter = JobReporter(ls, ls.cancels, uri, f"KernelBlaster: {path.name}")
    try:
        await reporter.begin("queued", "waiting for the GPU")
        try:
            text = await asyncio.to_thread(read_source, path)
        except OSError as exc:
            reporter.end("failed", f"cannot read it: {exc}")
            return
        ls.documents.record_read(path, text)
        await asyncio.to_thread(ls.history.note_reference, path, ls.settings)
        hashed = text_hash(text)
        # An edit saved at once, its build ahead still waiting out the typing pause: built now,
        # beside the wait for the GPU and the worker's start.
        ls.ahead.before_save(path, text, ls.settings)
        response = await _profile(ls, path, hashed, depth, reporter)
        result = new_result(path, hashed, response, earlier=ls.cache.get(path))
        await install(ls, result)
    except asyncio.CancelledError:
        # What was verified and timed before the cancel stays shown (`show_checked`).
        reporter.end("cancelled", "cancelled", superseded=ls.jobs.superseded(str(path)))
        raise
    delta = ls.history.delta(path, result.response.check, result.text_hash)
    ended = job_summary(result, delta)
    reporter.end("done", ended.message, headline=ended.headline)


async def _profile(
    ls: KernelBlasterServer,
    path: Path,
    hashed: str,
    depth: ProfileDepth | None,
    reporter: JobReporter,
) -> WorkerResponse:
    """The worker's response for `path`, run in a GPU slot: interactive until the worker says
    the rest is background work (jobs.py); stopped then by another file's interactive work,
    the request runs again, as background work, once no interactive work waits (its build is
    then a cache hit, and what it verifies and times again is published again)."""
    settings = ls.settings
    request = WorkerRequest(
        task="profile",
        source=str(path),
        settings=settings,
        depth=depth or settings.ncu_depth,
    )

    timed = ""  # once verified and timed, the status keeps saying so while the profile runs
    rankings: list[asyncio.Task] = []  # of early profiles' states
    slot: Slot | None = None
    running: asyncio.Task[WorkerResponse] | None = None

    def on_progress(message: WorkerProgress) -> None:
        nonlocal timed
        if message.check is not None and message.check.timing is not None:
            if not timed:  # where this run's seconds to its timing went, once per run
                cached = message.build is not None and message.build.cached
                log_timed(
                    TimedRun(
                        file=path.name,
                        build="cached" if cached else "built",
                        phases_s=message.check.phase_seconds,
                    )
                )
            show_checked(ls, path, hashed, message)
            delta = ls.history.delta(path, message.check, hashed)
            timed = f"{formatting.timing_line(message.check, delta)}; "
        if message.states:
            rankings.append(asyncio.get_running_loop().create_task(refresh_ranking(ls, path)))
        if message.background and slot is not None and running is not None:
            slot.yield_to_interactive(running.cancel)
        reporter.report(message.phase, f"{timed}{message.message}", message.percent)

    resumed = False
    try:
        while True:
            async with ls.jobs.gpu(background=resumed) as slot:
                starting = "resuming its profile" if resumed else "starting the worker"
                reporter.report("build", f"{timed}{starting}")
                running = asyncio.create_task(
                    run_harness(
                        request,
                        settings,
                        on_progress=on_progress,
                        spares=ls.spare_workers,
                        cwd=path.parent,
                    )
                )
                if resumed:
                    slot.yield_to_interactive(running.cancel)
                try:
                    return await running
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if not slot.preempted or (task is not None and task.cancelling()):
                        raise
            resumed = True
            log.info("%s: background work stopped for another file's interactive work", path.name)
            reporter.report("queued", f"{timed}profile paused: another file's save goes first")
    finally:
        # The final result is ranked after the early ones, never overwritten by them.
        if rankings:
            await asyncio.gather(*rankings)


def show_checked(ls: KernelBlasterServer, path: Path, hashed: str, message: WorkerProgress) -> None:
    """Publish a run's verification and timing while its profile runs: they replace the file's
    result, whose profile stays pinned to its kernels as an earlier version's until the new
    one lands, or until the worker's own counters give the new states ahead of ncu's source
    lines. Kept in memory only: the run's response is saved when it ends."""
    partial = WorkerResponse(
        build=message.build, check=message.check, profile=message.profile, states=message.states
    )
    ls.cache.put(new_result(path, hashed, partial, earlier=ls.cache.get(path)))
    publish(ls, path)


async def install(ls: KernelBlasterServer, result: FileResult) -> None:
    """Make `result` the file's current one: rank, cache, publish."""
    path = Path(result.source)
    ls.cache.put(result)
    await asyncio.to_thread(ls.cache.save, result)
    await asyncio.to_thread(ls.history.record, result)
    await refresh_ranking(ls, path)
    publish(ls, path)


async def show_cached(ls: KernelBlasterServer, path: Path) -> FileResult | None:
    """Show what is known about `path` without running anything (file just opened)."""
    result = await asyncio.to_thread(ls.cache.load, path)
    if result is not None:
        await refresh_ranking(ls, path)
    publish(ls, path)
    return result


async def refresh_ranking(ls: KernelBlasterServer, path: Path) -> None:
    result = ls.cache.get(path)
    await ls.knowledge.refresh(path, result.states if result else {})


def publish(ls: KernelBlasterServer, path: Path) -> None:
    """Diagnostics of `path` against its open document's current text (closed: nothing)."""
    uri = ls.documents.uri_of(path)
    document = ls.workspace.text_documents.get(uri) if uri else None
    if uri is None or document is None:
        return
    text = document.source
    lines = document.lines
    result = ls.cache.get(path)
    kernels = locate(text)
    found: list[types.Diagnostic] = []
    if result is not None:
        context = diagnostics.FileContext(uri=uri, path=path, lines=lines, kernels=kernels)
        delta = ls.history.delta(path, result.response.check, result.text_hash)
        found = diagnostics.file_diagnostics(
            result, context, text_hash=text_hash(text), delta=delta
        )
    if not ls.trust.trusted:
        found.append(diagnostics.untrusted_diagnostic(UNTRUSTED_DIAGNOSTIC, kernels))
    codec = ls.workspace.position_codec
    for item in found:
        item.range = to_client_range(codec, lines, item.range)
        for related in item.related_information or []:
            if related.location.uri == uri:  # another file's (a header's) is not in these lines
                related.location.range = to_client_range(codec, lines, related.location.range)
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=uri, diagnostics=found, version=document.version)
    )
    refresh_lenses(ls)


def refresh_lenses(ls: KernelBlasterServer) -> None:
    """Ask the client to resolve the code lenses again (their titles come from the results)."""
    workspace = ls.client_capabilities.workspace
    if workspace and workspace.code_lens and workspace.code_lens.refresh_support:
        ls.workspace_code_lens_refresh(None)
