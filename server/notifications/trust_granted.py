"""`kernelblaster/trustGranted`: the client's Workspace Trust was granted to this session, which
trusts the workspace from now on as a restart would (settings read again with the workspace's
files, the worker zygote started, each open source shown again and run where its cached result
is not of its text), without one: the open files' lenses and diagnostics stay on screen."""

from __future__ import annotations

from kernelblaster.harness.protocol.worker_client import harness_command
from kernelblaster.server.editor.documents import is_header
from kernelblaster.server.editor.trust import TrustGate
from kernelblaster.server.pipeline import save as pipeline
from kernelblaster.server.session import settings_sync
from kernelblaster.server.session.language_server import KernelBlasterServer

TRUST_GRANTED = "kernelblaster/trustGranted"


async def trust_granted(ls: KernelBlasterServer, params: object) -> None:
    if ls.trust.trusted:
        return
    await ls.ready.wait()
    ls.trust = TrustGate(True)
    await settings_sync.refresh(ls)
    ls.spare_workers.begin_zygote(harness_command(ls.settings))
    for path in ls.documents.paths():
        pipeline.publish(ls, path)  # without the untrusted diagnostic
        uri = ls.documents.uri_of(path)
        document = ls.workspace.text_documents.get(uri) if uri else None
        if document is None:
            continue
        if not is_header(path) and ls.settings.build_on_change:
            ls.ahead.expect_edits(ls.settings)
        pipeline.run_if_stale(ls, path, document.source)
