"""The language server starts its worker zygote with a trusted session, so that the first
spares after it are forked with torch imported instead of importing it themselves; an
untrusted session runs no worker and starts none; shutdown ends it. The real server and the
real zygote process."""

from __future__ import annotations

import asyncio

import psutil
import pytest

from bench.lsp_session import wait_until
from tests.server.conftest import start


def _zygotes(server_pid: int) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(server_pid).children()
        if "kernelblaster.harness.worker.zygote" in child.cmdline()
        and child.status() != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.parametrize("trusted", [True, False])
async def test_a_trusted_session_starts_the_worker_zygote(client, workspace, tmp_path, trusted):
    await start(
        client, workspace, trusted=trusted, workerCommand=[], cacheDir=str(tmp_path / "cache")
    )
    server = client._server.pid
    if not trusted:
        # No event marks a zygote not started: as long as a trusted session takes to start it
        await asyncio.sleep(2.0)
        assert _zygotes(server) == []
        return
    [zygote] = await wait_until(lambda: _zygotes(server), timeout=30)
    await client.shutdown_session()
    zygote.wait(timeout=10)  # shutdown ended it (psutil.TimeoutExpired otherwise)
    assert not zygote.is_running()
