"""What the provider makes of the HTTP layer's failures: which to retry, how long to wait, what they mean.

Kept apart from :mod:`.provider` (which sends, bounds and retries) so that
each stays one responsibility: this module classifies them, and lets go of
what the provider's own errors need not keep (:func:`forget_hidden_context`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Final

from agentium_harness.plugin_api import current_span_event

__all__ = [
    "STREAMING_ONLY",
    "Retryable",
    "attempt_event",
    "forget_hidden_context",
    "is_transport_error",
    "retry_after",
]

#: A 4xx message that says only streamed requests are served ("streaming is required",
#: "only supports stream=true", "stream must be true", "non-streaming requests are not
#: supported"). Phrases, not the bare word: an error that echoes the request body always
#: holds "stream":false, and "upstream" holds "stream" too.
STREAMING_ONLY: Final = re.compile(
    r"""\bstream(?:ing|ed)?\b\W{0,3}\s*(?:mode\s+|requests?\s+)?(?:is\s+|are\s+|must\s+be\s+)?"""
    r"""(?:required|mandatory)\b"""
    r"""|\bstream(?:ing|ed)?[\s-]+only\b"""
    r"""|\bonly\s+(?:supports?\s+|accepts?\s+|allows?\s+|serves?\s+)?(?:the\s+)?stream(?:ing|ed)?\b"""
    r"""|\bstream\b\W{0,3}\s*(?:must|should)\s+be\s+(?:set\s+to\s+)?true\b"""
    r"""|\bnon[\s-]?stream(?:ing|ed)?\b(?:\s+\w+){0,2}\s+(?:is|are)\s+(?:not\s+(?:supported|allowed)|unsupported)"""
    r"""|\b(?:does\s+not|doesn't|cannot|can't|do\s+not|don't)\s+support\s+non[\s-]?stream""",
    re.IGNORECASE,
)


class Retryable(Exception):
    """One failed attempt that may be retried: its HTTP status (or ``None``) and what happened."""

    def __init__(self, detail: str, status: int | None = None, retry_after: float | None = None) -> None:
        self.detail = detail
        self.status = status
        self.retry_after = retry_after
        super().__init__(detail)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait in seconds (``retry-after-ms`` or ``retry-after`` in seconds), if any."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date is not worth parsing: the backoff applies instead
        if seconds >= 0:
            return seconds
    return None


def is_transport_error(exc: BaseException) -> bool:
    """True for an error of the HTTP library under the ``openai`` client while a body arrives.

    The client wraps failures before the answer's headers in its own
    ``APIConnectionError``, but a body read through ``iter_bytes`` raises the
    library's own ``RemoteProtocolError`` (closed mid-body), ``ReadError``,
    ``ReadTimeout`` or ``DecodingError`` (a corrupt ``Content-Encoding``). The
    library is ``httpx`` (openai 1.x and 2.x) or ``httpx2`` (openai 3.x): its
    ``HTTPError`` is the root of all of these.
    """
    root = type(exc).__module__.partition(".")[0]
    if root not in ("httpx", "httpx2"):
        return False
    base = getattr(sys.modules.get(root), "HTTPError", None)
    return isinstance(base, type) and isinstance(exc, base)


def forget_hidden_context(exc: BaseException) -> BaseException:
    """``exc`` no longer holding the exception it was raised over ``from None``; ``exc`` itself, returned.

    Python keeps an error raised ``from None`` while another is handled as its
    ``__context__``, only hidden from tracebacks. The provider raises its typed
    errors that way over the client's own: a lent client's ``APIStatusError``
    holds the whole error body it read (its response too), and a host that
    keeps the typed error would keep all of it. The typed error already quotes
    what it needs (the server's message, scrubbed, at most 500 characters), so
    the hidden chain is let go. An error raised with a cause, or over a context
    it shows, keeps it.
    """
    if exc.__suppress_context__ and exc.__cause__ is None:
        exc.__context__ = None
    return exc


def attempt_event(name: str, attempt: int, status: int | None) -> None:
    """A failed attempt as an event on the call's span (the ``chat`` span), next to its WARNING.

    The attempt's number and HTTP status only: the server's error text may echo the request.
    """
    said: dict[str, int] = {"agentium.openai.attempt": attempt}
    if status is not None:
        said["http.response.status_code"] = status
    current_span_event(name, said)
