"""`shutdown`: builds ahead, jobs and spare workers stopped, the watcher and the KB closed."""

from __future__ import annotations

from kernelblaster.server.session.language_server import KernelBlasterServer


async def shutdown(ls: KernelBlasterServer, params: None) -> None:
    await ls.ahead.close()
    await ls.jobs.close()
    await ls.spare_workers.close()
    if ls.watcher is not None:
        ls.watcher.stop()
    ls.knowledge.close()
