"""JSON-RPC as the spec has it, where pygls falls short: every request gets exactly one
response, and nothing internal reaches the user as a popup.

pygls drops a request whose params don't fit the method's type (it reports the error out of
band, and the client waits forever), drops requests that arrive after `shutdown`, and answers
unparseable JSON with a popup instead of a -32700 response. Here:

- a request before `initialize` gets -32002 (ServerNotInitialized), and a notification before it
  is dropped, as the LSP spec requires (pygls ran the handler, which failed: -32603 and a
  traceback);
- a request whose params are invalid gets -32602 (Invalid Params) naming the method;
- a request after `shutdown` gets -32600 (Invalid Request), as the LSP spec requires;
- a request for a method the server doesn't have gets pygls' -32601 (Method Not Found) and is
  logged as such, not as an internal error;
- a message that is not JSON gets -32700 (Parse Error) with a null id;
- errors outside any request (a notification handler's bug, a stopped job) go to the
  client's log (`window/logMessage`), never to a `window/showMessage` popup.
"""

from __future__ import annotations

import json
import logging
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
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)


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

    def handle_message(self, message: Any) -> None:
        if isinstance(message, DroppedNotification):
            log.info("dropped %s: it came before `initialize`", message.method)
            return
        if isinstance(message, RejectedRequest):
            log.warning("%s", message.error)
            self._send_response(message.id, error=message.error.to_response_error())
            return
        super().handle_message(message)


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
