"""A small HTTP/1.1 fault proxy between botocore and a real S3 server, on a free loopback port.

It forwards each request whole to the server and the server's response whole
back, except when a queued :class:`Fault` matches the request (method and a
substring of the path):

- ``drop``: the request reaches the server, which processes it; the proxy
  reads the server's full response, then closes the client's connection
  without sending a byte of it (a lost acknowledgment).
- ``delay``: the response is held for ``seconds`` before it is sent.
- ``hold``: the request is held for ``seconds`` before it is forwarded (it
  lands late, after the client may have given up); with ``release`` set, only
  until that event is set (``seconds`` at most), so a test forwards it when it wants.
- ``corrupt_request``: one byte of the request body is flipped on the way to
  the server (its checksum headers are left as they were).
- ``corrupt_response``: one byte of the response body is flipped on the way back.
- ``edit_response``: the response body is replaced by ``edit(body)`` on the way
  back (its length header follows): a server answering what S3 never would.
- ``refuse``: the client's connection is closed before anything is forwarded.

botocore sends ``Expect: 100-continue`` on uploads: the proxy answers
``100 Continue`` itself, reads the body, and forwards the request without the
``Expect`` header (so the server never waits for a body the proxy already has).
Bodies are read by ``Content-Length`` or ``Transfer-Encoding: chunked``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

MODES = ("drop", "delay", "hold", "corrupt_request", "corrupt_response", "edit_response", "refuse")


@dataclass
class Fault:
    """One fault to apply to the next ``count`` requests matching ``method`` and ``path_contains``."""

    mode: str
    method: str = "PUT"
    path_contains: str = ""
    count: int = 1
    seconds: float = 0.0
    applied: int = 0
    #: ``time.monotonic()`` when a held request was forwarded to the server (``hold`` only), so a
    #: test can tell that a call waited for it from the order of events, not from its own duration.
    forwarded_at: float | None = None
    #: Held requests (``hold`` only) whose server answer has not been read yet: a late write counts
    #: until the server has processed it, so a soak knows when every late write has landed.
    in_hold: int = 0
    #: Applies only once this other fault has applied (a read held only after a write was held).
    after: Fault | None = None
    #: Ends a ``hold`` early when set (the test's own moment, not a guess at how long anything takes).
    release: threading.Event | None = None
    #: Set as a held request starts waiting (``hold`` only): the request is at the proxy, not yet forwarded.
    arrived: threading.Event = field(default_factory=threading.Event)
    #: The new body of an ``edit_response`` fault, from the server's.
    edit: Callable[[bytes], bytes] | None = None

    def matches(self, method: str, path: str) -> bool:
        """True if this fault applies to a request (and has uses left)."""
        return (
            self.applied < self.count
            and method == self.method
            and self.path_contains in path
            and (self.after is None or self.after.applied > 0)
        )


@dataclass
class _Message:
    head: bytes
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def line_block(self) -> bytes | None:
        """Bytes up to and including the blank line ending a header block, or None at EOF."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                return None
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head + b"\r\n\r\n"

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("peer closed mid-body")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("peer closed mid-chunk")
        data, self.buf = self.buf.split(b"\r\n", 1)
        return data

    def chunked(self) -> bytes:
        """A chunked body, returned de-chunked."""
        out = b""
        while True:
            size = int(self.line().split(b";")[0], 16)
            if size == 0:
                while self.line():  # trailers, up to the blank line
                    pass
                return out
            out += self.exactly(size)
            self.exactly(2)


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines if ":" in ln)}


def _rebuild(head: bytes, body: bytes, drop: tuple[str, ...] = ()) -> bytes:
    """Head with ``drop`` headers removed and chunked encoding replaced by Content-Length."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [lines[0]]
    chunked = False
    for ln in lines[1:]:
        if not ln:
            continue
        name = ln.split(":", 1)[0].strip().lower()
        if name == "transfer-encoding":
            chunked = True
            continue
        if name in drop:
            continue
        kept.append(ln)
    if chunked or "content-length" in drop:
        kept.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1") + body


def _flip(body: bytes) -> bytes:
    if not body:
        return body
    i = len(body) // 2
    return body[:i] + bytes([body[i] ^ 0x20]) + body[i + 1 :]


class FaultProxy:
    """The proxy: ``endpoint`` is what a client points at; ``faults`` is consumed in order."""

    def __init__(self, upstream_port: int, *, latency_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        #: Added before every response (a network round trip, for benchmarks).
        self.latency_s = latency_s
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self.continues = 0
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` of the proxy."""
        return f"http://127.0.0.1:{self.port}"

    def add(self, fault: Fault) -> Fault:
        """Queue ``fault``; returns it (its ``applied`` counts uses)."""
        with self._lock:
            self.faults.append(fault)
        return fault

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests.append((method, path))
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.applied += 1
                    return fault
        return None

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _read_request(self, reader: _Reader, client: socket.socket) -> _Message | None:
        head = reader.line_block()
        if head is None:
            return None
        headers = _headers(head)
        if headers.get("expect", "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            with self._lock:
                self.continues += 1
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = reader.chunked()
        else:
            body = reader.exactly(int(headers.get("content-length", "0") or 0))
        return _Message(head, body, headers)

    def _read_response(self, reader: _Reader, method: str) -> _Message:
        while True:
            head = reader.line_block()
            if head is None:
                raise ConnectionError("server closed without a response")
            if not head.startswith(b"HTTP/1.1 100"):
                break
        headers = _headers(head)
        status = int(head.split(b" ", 2)[1])
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = reader.chunked()
        else:
            body = reader.exactly(int(headers.get("content-length", "0") or 0))
        return _Message(head, body, headers)

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            reader = _Reader(client)
            while True:
                request = self._read_request(reader, client)
                if request is None:
                    return
                method, path = request.head.decode("latin-1").split(" ", 2)[:2]
                fault = self._take(method, path)
                if fault is not None and fault.mode == "refuse":
                    return
                body = request.body
                if fault is not None and fault.mode == "corrupt_request":
                    body = _flip(body)
                held = fault if fault is not None and fault.mode == "hold" else None
                if held is not None:
                    with self._lock:
                        held.in_hold += 1
                    held.arrived.set()
                try:
                    if held is not None:
                        if held.release is not None:
                            held.release.wait(held.seconds)
                        else:
                            time.sleep(held.seconds)
                        held.forwarded_at = time.monotonic()
                    if upstream is None:
                        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
                        up_reader = _Reader(upstream)
                    upstream.sendall(_rebuild(request.head, body, drop=("expect",)))
                    response = self._read_response(up_reader, method)
                finally:
                    if held is not None:
                        with self._lock:
                            held.in_hold -= 1
                if fault is not None and fault.mode == "drop":
                    return  # the server did the work; the client never hears of it
                if fault is not None and fault.mode == "delay":
                    time.sleep(fault.seconds)
                elif self.latency_s:
                    time.sleep(self.latency_s)
                out_body = response.body
                if fault is not None and fault.mode == "corrupt_response":
                    out_body = _flip(out_body)
                length: tuple[str, ...] = ()
                if fault is not None and fault.mode == "edit_response" and fault.edit is not None:
                    out_body, length = fault.edit(out_body), ("content-length",)  # a length of its own
                if method == "HEAD":
                    client.sendall(response.head)
                else:
                    client.sendall(_rebuild(response.head, out_body, drop=length))
                if response.headers.get("connection", "").lower() == "close":
                    return
        except (OSError, ConnectionError, ValueError):
            return
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def close(self) -> None:
        """Stop accepting; open connections end when their peers close."""
        self._stopped = True
        self._listener.close()


@contextmanager
def fault_proxy(upstream_port: int) -> Iterator[FaultProxy]:
    """A proxy to ``127.0.0.1:<upstream_port>`` for the duration of the block."""
    proxy = FaultProxy(upstream_port)
    try:
        yield proxy
    finally:
        proxy.close()
