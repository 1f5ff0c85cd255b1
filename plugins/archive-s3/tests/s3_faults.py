"""botocore event hooks that answer requests with injected S3 errors (503, 409, throttling, 403, any code).

A ``before-send`` handler that returns a response makes botocore use it
instead of sending the request: the server never sees those attempts. The
hooks are registered on a client the test lends to an adapter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from xml.sax.saxutils import escape

from botocore.awsrequest import AWSResponse

_BODIES = {
    503: ("SlowDown", "Please reduce your request rate."),
    409: ("ConditionalRequestConflict", "A conflicting conditional operation is in progress."),
    400: ("ThrottlingException", "Rate exceeded"),
    403: ("AccessDenied", "Access Denied"),
}


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body


class InjectedErrors:
    """Answer the next ``count`` matching requests with ``status`` (and S3's code for it)."""

    def __init__(
        self,
        client: Any,
        status: int,
        *,
        operation: str = "PutObject",
        count: int = 10**9,
        code: str | None = None,
    ) -> None:
        self.client = client
        self.status = status
        #: The error code to answer with instead of S3's for ``status`` (a hostile server's, say).
        self.code = code
        self.count = count
        self.operation = operation
        self.answered = 0
        self.passed = 0
        self._id = f"inject-{id(self)}"
        client.meta.events.register(f"before-send.s3.{operation}", self._handler, unique_id=self._id)

    def _handler(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        if self.answered >= self.count:
            self.passed += 1
            return None
        self.answered += 1
        code, message = _BODIES.get(self.status, ("InternalError", "We encountered an internal error."))
        code = code if self.code is None else escape(self.code)
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            "<RequestId>injected</RequestId></Error>"
        ).encode()
        headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
        return AWSResponse(request.url, self.status, headers, _Raw(body))

    def remove(self) -> None:
        """Stop injecting."""
        self.client.meta.events.unregister(f"before-send.s3.{self.operation}", unique_id=self._id)
