"""Reporting one job to the client: work-done progress under a fresh token, and the
`kernelblaster/jobStatus` notification that drives a status bar.

pygls doesn't route a client's cancel to the request or task doing the work, so each reporter
registers its token with `CancelRegistry`; the server's `window/workDoneProgress/cancel` handler
calls `CancelRegistry.cancel(token)`, which cancels the job's task (and so kills its worker)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

JOB_STATUS = "kernelblaster/jobStatus"


class CancelRegistry:
    def __init__(self) -> None:
        self._callbacks: dict[str, Callable[[], Any]] = {}

    def add(self, token: str, callback: Callable[[], Any]) -> None:
        self._callbacks[token] = callback

    def remove(self, token: str) -> None:
        self._callbacks.pop(token, None)

    def cancel(self, token: types.ProgressToken) -> bool:
        callback = self._callbacks.pop(str(token), None)
        if callback is None:
            return False
        callback()
        return True


class JobReporter:
    def __init__(
        self, server: LanguageServer, cancels: CancelRegistry, uri: str, title: str
    ) -> None:
        self._server = server
        self._cancels = cancels
        self._uri = uri
        self._title = title
        self._token: str | None = None
        self._task = asyncio.current_task()

    async def begin(self, phase: str, message: str) -> None:
        self._status(True, phase, message)
        if not _supports_progress(self._server):
            return
        token = f"kernelblaster-{uuid.uuid4().hex}"
        try:
            await self._server.work_done_progress.create_async(token)
        except JsonRpcException as exc:  # a client may refuse; the job runs without progress
            log.info("client refused a progress token: %s", exc)
            return
        self._token = token
        if self._task is not None:
            self._cancels.add(token, self._task.cancel)
        self._server.work_done_progress.begin(
            token,
            types.WorkDoneProgressBegin(title=self._title, message=message, cancellable=True),
        )

    def report(self, phase: str, message: str, percent: int | None = None) -> None:
        self._status(True, phase, message)
        if self._token is not None:
            self._server.work_done_progress.report(
                self._token, types.WorkDoneProgressReport(message=message, percentage=percent)
            )

    def end(
        self, phase: str, message: str, *, superseded: bool = False, headline: str | None = None
    ) -> None:
        """End the job's progress and status; a job `superseded` by a newer one for the same
        file ends its progress only: the file's status is the newer job's (a "not running" sent
        after the newer job's start would show the file idle while it waits for the GPU).
        `headline`: the status bar's short text for the result, led by the file's name."""
        if not superseded:
            self._status(False, phase, message, headline)
        if self._token is not None:
            self._server.work_done_progress.end(
                self._token, types.WorkDoneProgressEnd(message=message)
            )
            self._cancels.remove(self._token)
            self._server.work_done_progress.tokens.pop(self._token, None)
            self._token = None

    def _status(self, running: bool, phase: str, message: str, headline: str | None = None) -> None:
        status = {"uri": self._uri, "running": running, "phase": phase, "message": message}
        if headline is not None:
            status["headline"] = headline
        self._server.protocol.notify(JOB_STATUS, status)


def _supports_progress(server: LanguageServer) -> bool:
    window = server.client_capabilities.window
    return bool(window and window.work_done_progress)
