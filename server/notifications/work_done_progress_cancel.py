"""`window/workDoneProgress/cancel`: the job that reports under the token is cancelled."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.session.language_server import KernelBlasterServer


def cancel_progress(ls: KernelBlasterServer, params: types.WorkDoneProgressCancelParams) -> None:
    ls.cancels.cancel(params.token)
