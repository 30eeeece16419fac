"""JSON-RPC as the spec has it where pygls falls short: every request gets exactly one response
(-32002 before `initialize`, -32602 for invalid params, -32600 after `shutdown`, -32700 for
unparseable JSON), internal errors go to the client's log and never to a popup,
`$/cancelRequest` of a command cancels the command's own task (pygls cancelled only the
answer), and `shutdown` cancels and awaits running requests first (pygls issue #606)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any

import msgspec
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.protocol import LanguageServerProtocol, lsp_method

log = logging.getLogger(__name__)

# How long `shutdown` waits for the requests it cancelled (each kills its worker's process
# group and waits for it: well under a second) before it goes on without them.
CANCELLED_REQUESTS_WAIT_S = 10.0


class RejectedRequest(msgspec.Struct, frozen=True):
    """A request that could not be read as its method's type: answered with `error` only."""

    id: int | str
    method: str
    error: JsonRpcException


class DroppedNotification(msgspec.Struct, frozen=True):
    """A notification that came before `initialize`: not handled (LSP: dropped)."""

    method: str


class KernelBlasterProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._initialize_received = False
        # The answer of the generator handler (executeCommand, shutdown, ...) being stepped,
        # while it starts its next handler (`_run_generator`, `_execute_handler`).
        self._stepping: Future[Any] | None = None
        # Each running generator handler's answer → the handler it runs now.
        self._running_steps: dict[Future[Any], Future[Any]] = {}

    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method")
        # A request's method: a request has an id (a notification has none) and names a method.
        requested = method if "id" in data and isinstance(method, str) else None
        if not self._initialize_received and isinstance(method, str):
            if method == types.INITIALIZE and requested is not None:
                self._initialize_received = True
            elif method != types.EXIT:
                if requested is None:
                    return DroppedNotification(method)
                early = JsonRpcServerNotInitialized(f"{requested}: send `initialize` first")
                return RejectedRequest(data["id"], requested, early)
        if self._shutdown and requested is not None and requested != types.EXIT:
            refusal = JsonRpcInvalidRequest(f"{requested}: the server is shutting down")
            return RejectedRequest(data["id"], requested, refusal)
        try:
            return super().structure_message(data)
        except JsonRpcInvalidParams as exc:
            if requested is not None:
                message = f"invalid params for {requested}: {exc.__cause__ or exc}"
                return RejectedRequest(data["id"], requested, JsonRpcInvalidParams(message))
            raise  # a notification: nobody waits for an answer; logged by report_server_error

    def _run_generator(
        self, future: Future[Any] | None, *, gen: Generator[Any, Any, Any], result_future: Any
    ) -> None:
        stepping, self._stepping = self._stepping, result_future
        try:
            super()._run_generator(future, gen=gen, result_future=result_future)
        finally:
            self._stepping = stepping
            if result_future.done():
                self._running_steps.pop(result_future, None)

    def _execute_handler(
        self,
        msg_id: Any,
        handler: Callable[..., Any],
        callback: Callable[[Any], None],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        answer = self._stepping
        step = self._request_futures.get(msg_id)
        if answer is None or step is None or step is answer:
            return
        # pygls keeps a step's future under a made-up id that nothing ever removes.
        self._request_futures.pop(msg_id, None)
        self._running_steps[answer] = step
        answer.add_done_callback(_cancel_with(step))

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        own = self._stepping
        cancelled = [
            future
            for future in list(self._request_futures.values())
            if future is not own and not future.done() and future.cancel()
        ]
        # A command's answer is computed by its step; a coroutine's request is its own task.
        steps = [self._running_steps.get(future, future) for future in cancelled]
        running = [step for step in steps if isinstance(step, asyncio.Future)]
        if running:
            yield _settle, (running,), None
        if (handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield handler, args, None
        self._shutdown = True

    def handle_message(self, message: Any) -> None:
        if isinstance(message, DroppedNotification):
            log.info("dropped %s: it came before `initialize`", message.method)
            return
        if isinstance(message, RejectedRequest):
            log.warning("%s", message.error)
            self._send_response(message.id, error=message.error.to_response_error())
            return
        super().handle_message(message)


def _cancel_with(step: Future[Any]) -> Callable[[Future[Any]], None]:
    """A done-callback for a request's answer: a cancelled answer cancels `step`, the
    handler that computes it."""

    def cancel(answer: Future[Any]) -> None:
        if answer.cancelled():
            step.cancel()

    return cancel


async def _settle(running: list[asyncio.Future[Any]]) -> None:
    """Wait for cancelled handlers to end (each kills its worker as it does)."""
    _, late = await asyncio.wait(running, timeout=CANCELLED_REQUESTS_WAIT_S)
    if late:
        log.warning("shutdown: %d cancelled request(s) still running", len(late))


def report_out_of_band(protocol: LanguageServerProtocol, error: Exception) -> None:
    """What the server does with an error no request is waiting for: a parse error is answered
    as JSON-RPC says; a request for an unknown method (already answered -32601) is noted;
    everything else is logged for whoever reads the server's log."""
    if isinstance(error, JsonRpcMethodNotFound):
        log.info("%s", error.message)
        return
    if isinstance(error, json.JSONDecodeError):
        refusal = JsonRpcParseError(f"the message is not JSON: {error}")
        # Written as a plain dict: the typed serializer drops the `"id": null` JSON-RPC needs.
        protocol._send_data(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": refusal.code, "message": refusal.message},
            }
        )
        return
    log.error("internal error: %s: %s", type(error).__name__, error)
    protocol.notify(
        types.WINDOW_LOG_MESSAGE,
        types.LogMessageParams(
            type=types.MessageType.Error,
            message=f"KernelBlaster internal error ({type(error).__name__}): {error}",
        ),
    )
