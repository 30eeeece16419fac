"""The server against a hostile JSON-RPC peer, byte for byte: every request gets exactly one
well-formed response (an error where needed), notifications with garbage get none, nothing
is shown as a popup, and the server keeps working — malformed JSON, wrong params for every
method it registers, requests before `initialize` and after `shutdown`, unknown methods."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from kernelblaster.server.app import server as kernelblaster_server
from tests.server.conftest import PROBE

WRONG_PARAMS = [{"bogus": True}, [1, 2, 3], "text", 7]
LIFECYCLE = {"initialize", "initialized", "shutdown", "exit"}


class RawClient:
    """LSP framing over a subprocess's pipes, and nothing else: no validation of what we send."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log  # the server's stderr
        self.received: list[dict] = []

    async def send_bytes(self, body: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.process.stdin.drain()

    async def send(self, message: dict) -> None:
        await self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    async def _read_one(self) -> dict:
        assert self.process.stdout is not None
        length = 0
        while (line := await self.process.stdout.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        if not length:
            raise EOFError("the server closed its output")
        return json.loads(await self.process.stdout.readexactly(length))

    async def response(self, request_id, timeout: float = 10.0) -> dict:
        """The response to `request_id`, answering the server's own requests meanwhile."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self._read_one()
                self.received.append(message)
                if "method" in message and "id" in message:  # e.g. workspace/configuration
                    await self.send({"id": message["id"], "result": [None]})
                elif "method" not in message and message.get("id") == request_id:
                    return message

    async def quiet_for(self, seconds: float) -> None:
        """Collects what the server sends for `seconds` (expecting no responses)."""
        with pytest.raises(TimeoutError):
            await self.response("never", timeout=seconds)

    def responses_to(self, request_id) -> list[dict]:
        return [m for m in self.received if "method" not in m and m.get("id") == request_id]

    def popups(self) -> list[dict]:
        return [m for m in self.received if m.get("method") == "window/showMessage"]


def _registered_methods() -> set[str]:
    features = kernelblaster_server.protocol.fm
    return set(features.features) | set(features.builtin_features)


@pytest.fixture
async def raw(tmp_path: Path):
    env = {
        **os.environ,
        "KERNELBLASTER_PROBE_MODULES": str(tmp_path / "modules.json"),
        "KERNELBLASTER_KB": str(tmp_path / "kb.sqlite3"),
    }
    log = tmp_path / "server-stderr.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(PROBE),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    client = RawClient(process, log)
    yield client
    if process.returncode is None:
        process.kill()
    await process.wait()


async def _initialize(raw: RawClient, root: Path) -> None:
    params = {"processId": None, "rootUri": root.as_uri(), "capabilities": {}}
    await raw.send({"id": "init", "method": "initialize", "params": params})
    assert "result" in await raw.response("init")
    await raw.send({"method": "initialized", "params": {}})


async def test_every_request_gets_one_response_whatever_it_carries(raw, tmp_path):
    await _initialize(raw, tmp_path)
    requests = 0
    for method in sorted(_registered_methods() - LIFECYCLE):
        for params in WRONG_PARAMS:
            requests += 1
            request_id = f"{method}#{requests}"
            await raw.send({"id": request_id, "method": method, "params": params})
            answer = await raw.response(request_id)
            assert ("result" in answer) != ("error" in answer), answer
            if "error" in answer:
                assert isinstance(answer["error"]["code"], int) and answer["error"]["message"]
            # the same garbage as a notification: no answer, and the server carries on
            await raw.send({"method": method, "params": params})
    assert requests >= 4 * 10

    # not JSON at all: JSON-RPC's parse error, with a null id
    await raw.send_bytes(b'{"jsonrpc": "2.0", "id": 99, "method": ')
    parse_error = await raw.response(None)
    assert parse_error["id"] is None and parse_error["error"]["code"] == -32700

    # a hover the spec's way still works after all that
    hover = {"textDocument": {"uri": (tmp_path / "x.cu").as_uri()}, "position": {"line": 0}}
    hover["position"]["character"] = 0
    await raw.send({"id": "hover", "method": "textDocument/hover", "params": hover})
    assert (await raw.response("hover"))["result"] is None  # not an open document

    await raw.quiet_for(0.5)
    for method in sorted(_registered_methods() - LIFECYCLE):
        assert all(len(raw.responses_to(f"{method}#{n}")) <= 1 for n in range(requests + 1))
    assert raw.popups() == []


async def test_the_hover_that_used_to_hang_gets_invalid_params(raw, tmp_path):
    await _initialize(raw, tmp_path)
    await raw.send({"id": 1, "method": "textDocument/hover", "params": {"bogus": True}})
    answer = await raw.response(1)
    assert answer["error"]["code"] == -32602
    assert "textDocument/hover" in answer["error"]["message"]


async def test_requests_after_shutdown_are_refused_and_exit_ends_the_server(raw, tmp_path):
    await _initialize(raw, tmp_path)
    await raw.send({"id": "bye", "method": "shutdown"})
    assert (await raw.response("bye"))["result"] is None
    await raw.send({"id": "late", "method": "textDocument/hover", "params": {}})
    late = await raw.response("late")
    assert late["error"]["code"] == -32600 and "shutting down" in late["error"]["message"]
    await raw.send({"method": "exit"})
    assert await asyncio.wait_for(raw.process.wait(), timeout=10) == 0
    assert raw.popups() == []


async def test_a_request_before_initialize_gets_server_not_initialized(raw, tmp_path):
    hover = {"textDocument": {"uri": (tmp_path / "x.cu").as_uri()}}
    hover["position"] = {"line": 0, "character": 0}
    await raw.send({"id": "early", "method": "textDocument/hover", "params": hover})
    early = await raw.response("early")
    assert early["error"]["code"] == -32002 and "initialize" in early["error"]["message"]
    # a notification before initialize is dropped: no answer, no error, and none later
    document = {"uri": (tmp_path / "x.cu").as_uri(), "languageId": "cuda", "version": 1}
    document["text"] = "__global__ void k() {}\n"
    await raw.send({"method": "textDocument/didOpen", "params": {"textDocument": document}})
    await _initialize(raw, tmp_path)
    await raw.send({"id": "later", "method": "textDocument/hover", "params": hover})
    assert (await raw.response("later"))["result"] is None  # x.cu was never opened
    await raw.quiet_for(0.3)
    assert "Traceback" not in raw.log.read_text() and raw.popups() == []


async def test_an_unknown_method_is_method_not_found_and_no_internal_error(raw, tmp_path):
    await _initialize(raw, tmp_path)
    await raw.send({"id": "odd", "method": "kernelblaster/noSuchThing", "params": {}})
    odd = await raw.response("odd")
    assert odd["error"]["code"] == -32601
    await raw.send({"method": "$/noSuchNotification", "params": {}})
    await raw.quiet_for(0.3)
    logged = [m for m in raw.received if m.get("method") == "window/logMessage"]
    assert not [m for m in logged if "internal error" in m["params"]["message"]]
    log = raw.log.read_text()
    assert "internal error" not in log and "Traceback" not in log
