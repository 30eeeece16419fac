"""A real OpenAI-compatible HTTP server for tests: it replays a script of responses.

It serves `POST /v1/chat/completions` and `GET /v1/models` on 127.0.0.1 in a thread. Each chat
request takes the next script entry (a reply, an HTTP error, a delay, a raw body), then a
`responder` once the script is used up. Like a real server it answers 404 for an unknown model
and 401 for a wrong `api_key`, echoing its tail as OpenAI does. Every request is recorded."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A recognisable fake key: tests assert it never shows up in logs, reprs or error messages.
FAKE_KEY = "sk-test-SECRET-0123456789abcdefXYZ"


@dataclass(frozen=True)
class Reply:
    """A normal chat completion. `usage=None` leaves the usage block out of the response."""

    text: str
    usage: tuple[int, int] | None = (100, 50)
    finish_reason: str = "stop"
    delay_s: float = 0.0


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str = "error"
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None


@dataclass(frozen=True)
class RawBody:
    """A 200 response whose body is whatever the test says (to exercise malformed replies)."""

    body: str
    content_type: str = "application/json"


Scripted = Reply | HttpError | RawBody


def reply(text: str, **kwargs: Any) -> Reply:
    return Reply(text, **kwargs)


def rate_limited(retry_after: str | None = "1", *, retry_after_ms: str | None = None) -> HttpError:
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    return HttpError(429, "Rate limit reached, please slow down", headers, "rate_limit_exceeded")


def server_error(status: int = 500, headers: dict[str, str] | None = None) -> HttpError:
    return HttpError(status, "The server had an error while processing your request", headers or {})


def delayed(seconds: float, text: str = "late") -> Reply:
    return Reply(text, delay_s=seconds)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any] | None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return (self.body or {}).get("messages", [])

    @property
    def prompt_text(self) -> str:
        """All message contents of a chat request, joined (for assertions on prompts)."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


class OpenAITestServer:
    def __init__(
        self,
        script: Iterable[Scripted] = (),
        *,
        models: Iterable[str] = ("test-model",),
        api_key: str | None = None,
        responder: Callable[[RecordedRequest], Scripted] | None = None,
    ) -> None:
        self.script: deque[Scripted] = deque(script)
        self.responder = responder
        self.models = list(models)
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll interval keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def push(self, *entries: Scripted) -> None:
        with self._lock:
            self.script.extend(entries)

    def start(self) -> OpenAITestServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping through a scripted delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- request handling -------------------------------------------------------------------

    def _next(self, request: RecordedRequest) -> Scripted:
        with self._lock:
            if self.script:
                return self.script.popleft()
        if self.responder is not None:
            return self.responder(request)
        return HttpError(
            500, "test server script exhausted: the test sent more requests than it scripted"
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                return

            def do_GET(self) -> None:
                server._record(self, None)
                if self.path.rstrip("/") != "/v1/models":
                    self._send_error(HttpError(404, f"no route {self.path}"))
                    return
                data = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "test"}
                    for m in server.models
                ]
                self._send_json(200, {"object": "list", "data": data})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = None
                request = server._record(self, body)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send_error(HttpError(404, f"no route {self.path}"))
                    return
                auth = self.headers.get("Authorization", "")
                if server.api_key is not None and auth != f"Bearer {server.api_key}":
                    presented = auth.removeprefix("Bearer ")
                    self._send_error(
                        HttpError(
                            401, f"Incorrect API key provided: {presented}", code="invalid_api_key"
                        )
                    )
                    return
                model = (body or {}).get("model")
                if model not in server.models:
                    self._send_error(
                        HttpError(
                            404, f"The model `{model}` does not exist", code="model_not_found"
                        )
                    )
                    return
                self._send_scripted(server._next(request), model)

            def _send_scripted(self, entry: Scripted, model: str) -> None:
                if isinstance(entry, HttpError):
                    self._send_error(entry)
                elif isinstance(entry, RawBody):
                    self._send_bytes(200, entry.body.encode(), entry.content_type, {})
                else:
                    if entry.delay_s and server._stopping.wait(entry.delay_s):
                        return
                    self._send_json(200, _completion(entry, model))

            def _send_error(self, error: HttpError) -> None:
                payload = {
                    "error": {
                        "message": error.message,
                        "type": "invalid_request_error",
                        "param": None,
                        "code": error.code,
                    }
                }
                self._send_bytes(
                    error.status, json.dumps(payload).encode(), "application/json", error.headers
                )

            def _send_json(self, status: int, payload: dict[str, Any]) -> None:
                self._send_bytes(status, json.dumps(payload).encode(), "application/json", {})

            def _send_bytes(
                self, status: int, data: bytes, content_type: str, headers: dict[str, str]
            ) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (its timeout fired first): exactly what the test wanted.
                    return

        return Handler

    def _record(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None
    ) -> RecordedRequest:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        request = RecordedRequest(handler.command, handler.path, headers, body)
        with self._lock:
            self.requests.append(request)
        return request


def _completion(entry: Reply, model: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": f"chatcmpl-test-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": entry.text},
                "finish_reason": entry.finish_reason,
            }
        ],
    }
    if entry.usage is not None:
        prompt, completion = entry.usage
        payload["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return payload


Responder = Callable[[RecordedRequest], Scripted]


def reply_by_agent(replies: dict[str, Scripted | Responder]) -> Responder:
    """A responder that gives each of our agents its reply, whatever order their requests come in:
    an agent is named by its prompt template and recognised by its system message's opening. Any
    other request gets a 400, which the client does not retry."""
    from kernelblaster.agents.llm.prompting import load_template

    openings = {
        name: load_template(name)[0][1].template.split("$")[0].splitlines()[0] for name in replies
    }

    def respond(request: RecordedRequest) -> Scripted:
        system = str(request.messages[0].get("content", "")) if request.messages else ""
        for name, opening in openings.items():
            if system.startswith(opening):
                answer = replies[name]
                return answer(request) if callable(answer) else answer
        return HttpError(400, f"no scripted reply for a prompt starting {system[:60]!r}")

    return respond
