"""`initialized`: the watcher started, the settings refreshed, and (trusted) the worker zygote
started so that its torch import runs meanwhile."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from kernelblaster.harness.protocol.worker_client import harness_command
from kernelblaster.server.editor.watcher import SourceWatcher
from kernelblaster.server.pipeline.reruns import external_change
from kernelblaster.server.session import settings_sync
from kernelblaster.server.session.language_server import KernelBlasterServer


async def initialized(ls: KernelBlasterServer, params: types.InitializedParams) -> None:
    ls.watcher = SourceWatcher(asyncio.get_running_loop(), lambda path: external_change(ls, path))
    if (root := ls.workspace_root()) is not None:
        ls.watcher.watch(root)
    try:
        await settings_sync.refresh(ls)
    finally:
        ls.ready.set()
    if ls.trust.trusted:  # workers run only here: their zygote imports torch meanwhile
        ls.spare_workers.begin_zygote(harness_command(ls.settings))
