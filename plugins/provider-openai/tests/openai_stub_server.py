"""A small OpenAI-compatible HTTP server of the project's own, for the provider's tests.

It listens on a free 127.0.0.1 port in a background thread (stdlib
``http.server``), and serves ``POST /v1/chat/completions``,
``POST /v1/embeddings`` and ``GET /v1/models`` like a real server does:

- replies come from a script of :class:`Reply` items, consumed one per
  request; most carry a chat completion body recorded in the OpenAI format
  (``tests/recordings/*.json``), others an HTTP error, a delay, an event
  stream or a malformed body;
- embeddings are computed (:func:`embedding_of`: words hashed into
  ``embedding_dimension`` values, so texts that share words are similar)
  unless a scripted :class:`Reply` in :attr:`StubServer.embedding_script`
  answers instead; the request is checked (key, model, ``input`` a list of
  strings, ``encoding_format`` ``float``);
- every request is kept (:attr:`StubServer.requests`: path, headers, decoded
  JSON body), and checked as a strict server would check it: the bearer key,
  ``model``, ``stream`` false, the roles, tool results answering earlier tool
  calls, tools as ``function`` tools. A request that fails a check is answered
  HTTP 400 and its problems are kept in :attr:`StubServer.violations`.

Nothing here imports the provider: the tests drive the real ``openai``
client against it over real HTTP.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs

RECORDINGS = Path(__file__).parent / "recordings"

_ROLES = {"system", "developer", "user", "assistant", "tool"}


def recording(name: str) -> dict[str, Any]:
    """A recorded chat completion body from ``tests/recordings/<name>.json``."""
    data: dict[str, Any] = json.loads((RECORDINGS / f"{name}.json").read_text("utf-8"))
    return data


@attrs.define
class Reply:
    """One scripted answer.

    ``body`` is sent as JSON (or as is when it is ``bytes``); ``delay_s`` holds
    the answer back (ended early when the server stops); ``hold`` holds it until
    the event is set; ``headers`` are added (``Retry-After``, a content type);
    ``chunked`` sends the body in 64 KiB chunks with ``Transfer-Encoding: chunked``
    and no ``Content-Length``, so its size is known only by reading it;
    ``cut_after`` declares the whole body's ``Content-Length`` but sends only
    that many bytes of it, then closes the connection (a server that dies mid-answer);
    ``stall_after`` (with ``chunked``) sends that many bytes of the body, then sends
    nothing more until the server stops (a server that floods, then hangs).
    """

    body: Any = None
    status: int = 200
    headers: dict[str, str] = attrs.field(factory=dict)
    delay_s: float = 0.0
    hold: threading.Event | None = None
    chunked: bool = False
    cut_after: int | None = None
    stall_after: int | None = None

    @classmethod
    def recorded(cls, name: str, **changes: Any) -> Reply:
        """A 200 answer with the recorded body ``name``."""
        return cls(body=recording(name), **changes)

    @classmethod
    def error(cls, status: int, message: str, **changes: Any) -> Reply:
        """An OpenAI-style error body with ``status``."""
        kind = (
            "rate_limit_exceeded" if status == 429 else "server_error" if status >= 500 else "invalid_request"
        )
        return cls(body={"error": {"message": message, "type": kind, "code": None}}, status=status, **changes)

    @classmethod
    def event_stream(cls) -> Reply:
        """What a streaming-only server sends whatever was asked: ``text/event-stream`` chunks."""
        chunk = {
            "id": "chatcmpl-stream",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
        }
        text = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return cls(body=text.encode(), headers={"Content-Type": "text/event-stream"})


@attrs.define
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class StubServer:
    """The server; use :func:`running` to start and stop it."""

    def __init__(
        self, *, api_key: str | None = "sk-test-0123456789", models: tuple[str, ...] = ("stub-model",)
    ) -> None:
        self.api_key = api_key
        self.models = list(models)
        self.script: deque[Reply] = deque()
        self.model_replies: deque[Reply] = deque()
        self.embedding_script: deque[Reply] = deque()
        self.embedding_dimension = 8
        self.requests: list[Received] = []
        self.violations: list[str] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
        )

    @property
    def port(self) -> int:
        """The loopback port it listens on."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The API root to give the client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *replies: Reply) -> None:
        """Append replies to the chat completions script."""
        with self._lock:
            self.script.extend(replies)

    @property
    def completions(self) -> list[Received]:
        """The chat completion requests received, in order."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> StubServer:
        """Start serving in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; held and delayed answers end at once."""
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=30)

    # -- what a strict server checks -------------------------------------------------

    def check(self, headers: dict[str, str], body: Any) -> list[str]:
        """Every problem a strict OpenAI-compatible server would refuse ``body`` for."""
        problems: list[str] = []
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            problems.append("missing or wrong bearer key")
        if not isinstance(body, dict):
            return [*problems, "body is not a JSON object"]
        if not isinstance(body.get("model"), str) or not body["model"]:
            problems.append("no model")
        if body.get("stream", False) is not False:
            problems.append("stream is not false")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return [*problems, "no messages"]
        pending: set[str] = set()
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in _ROLES:
                problems.append(f"messages[{i}] has role {role!r}")
                continue
            content = message.get("content")
            if role == "user" and isinstance(content, list):
                if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                    problems.append(f"messages[{i}] has a content part that is not text")
            elif not (content is None and role == "assistant") and not isinstance(content, str):
                problems.append(f"messages[{i}] content is not text")
            if role != "system" and role != "developer" and i == 0:
                problems.append("the first message is not the system message")
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                if call.get("type") != "function" or not isinstance(function.get("arguments"), str):
                    problems.append(f"messages[{i}] has a malformed tool call")
                pending.add(call.get("id"))
            if role == "tool":
                if message.get("tool_call_id") not in pending:
                    problems.append(
                        f"messages[{i}] answers unknown tool call {message.get('tool_call_id')!r}"
                    )
                pending.discard(message.get("tool_call_id"))
        for tool in body.get("tools") or []:
            function = tool.get("function", {}) if isinstance(tool, dict) else {}
            if tool.get("type") != "function" or not isinstance(function.get("name"), str):
                problems.append(f"malformed tool {tool!r}")
            if not isinstance(function.get("parameters", {}), dict):
                problems.append(f"tool {function.get('name')!r} parameters are not a schema object")
        return problems

    def check_embeddings(self, headers: dict[str, str], body: Any) -> list[str]:
        """Every problem a strict server would refuse an embeddings request for."""
        problems: list[str] = []
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            problems.append("missing or wrong bearer key")
        if not isinstance(body, dict):
            return [*problems, "body is not a JSON object"]
        if not isinstance(body.get("model"), str) or not body["model"]:
            problems.append("no model")
        texts = body.get("input")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            problems.append("input is not a non-empty list of non-empty strings")
        if body.get("encoding_format") != "float":
            problems.append("encoding_format is not float")
        return problems

    def embeddings_reply(self, body: dict[str, Any]) -> Reply:
        """The scripted reply, or embeddings computed for ``body['input']``."""
        with self._lock:
            if self.embedding_script:
                return self.embedding_script.popleft()
        dimension = int(body.get("dimensions", self.embedding_dimension))
        data = [
            {"object": "embedding", "index": i, "embedding": embedding_of(text, dimension)}
            for i, text in enumerate(body["input"])
        ]
        usage = {"prompt_tokens": sum(len(t.split()) for t in body["input"]), "total_tokens": 0}
        return Reply(body={"object": "list", "data": data, "model": body["model"], "usage": usage})

    def next_reply(self, path: str) -> Reply:
        """The scripted reply for a request to ``path`` (a 500 when the script ran out)."""
        with self._lock:
            if path.endswith("/models"):
                if self.model_replies:
                    return self.model_replies.popleft()
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in self.models]
                return Reply(body={"object": "list", "data": data})
            if self.script:
                return self.script.popleft()
        self.violations.append("a request arrived after the script ran out")
        return Reply.error(500, "stub script exhausted")


def _handler(server: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are written separately; without TCP_NODELAY the
        # client's delayed ACK adds ~40 ms to every keep-alive answer.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            return

        def _answer(self, reply: Reply) -> None:
            if reply.hold is not None:
                while not reply.hold.wait(0.02) and not server.stopping.is_set():
                    pass
            if reply.delay_s:
                server.stopping.wait(reply.delay_s)
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                headers = {"Content-Type": "application/json", **reply.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(payload), 65536):
                        piece = payload[start : start + 65536]
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        if reply.stall_after is not None and start + len(piece) >= reply.stall_after:
                            self.wfile.flush()
                            server.stopping.wait()
                            return
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if reply.cut_after is not None:
                    self.wfile.write(payload[: reply.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (deadline or cancellation): nothing to answer

        def _receive(self, body: Any) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server._lock:
                server.requests.append(Received(self.command, self.path, headers, body))

        def do_GET(self) -> None:
            self._receive(None)
            if self.path.rstrip("/").endswith("/v1/models"):
                self._answer(server.next_reply(self.path))
            else:
                self._answer(Reply.error(404, f"no route {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            self._receive(body)
            if self.path.endswith("/v1/embeddings"):
                problems = server.check_embeddings({k.lower(): v for k, v in self.headers.items()}, body)
                if problems:
                    with server._lock:
                        server.violations.extend(problems)
                    self._answer(Reply.error(400, "; ".join(problems)))
                    return
                self._answer(server.embeddings_reply(body))
                return
            if not self.path.endswith("/v1/chat/completions"):
                self._answer(Reply.error(404, f"no route {self.path}"))
                return
            problems = server.check({k.lower(): v for k, v in self.headers.items()}, body)
            if problems:
                with server._lock:
                    server.violations.extend(problems)
                self._answer(Reply.error(400, "; ".join(problems)))
                return
            self._answer(server.next_reply(self.path))

    return Handler


def embedding_of(text: str, dimension: int) -> list[float]:
    """A deterministic embedding: each lower-cased word adds 1 to a bucket chosen by a stable hash."""
    import zlib

    out = [0.0] * dimension
    for word in text.lower().split():
        out[zlib.crc32(word.strip(".,!?").encode()) % dimension] += 1.0
    if not any(out):
        out[0] = 1.0
    return out


@contextmanager
def running(**options: Any) -> Iterator[StubServer]:
    """A started server, stopped on exit."""
    server = StubServer(**options).start()
    try:
        yield server
    finally:
        server.stop()
