"""`workspace/didChangeConfiguration`: the settings refreshed, rankings and diagnostics
republished, and every open source run again when the change alters results."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.configuration import results_change
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.pipeline.reruns import rerun_open_sources
from kernelblaster.server.session import settings_sync
from kernelblaster.server.session.language_server import KernelBlasterServer


async def did_change_configuration(
    ls: KernelBlasterServer, params: types.DidChangeConfigurationParams
) -> None:
    pushed = params.settings.get("kernelblaster") if isinstance(params.settings, dict) else None
    before = ls.settings
    await settings_sync.refresh(ls, pushed)
    for path in ls.documents.paths():
        await pipeline.refresh_ranking(ls, path)
        pipeline.publish(ls, path)
    if results_change(before, ls.settings):  # e.g. nvcc's path fixed: no stale "not found"
        rerun_open_sources(ls)
