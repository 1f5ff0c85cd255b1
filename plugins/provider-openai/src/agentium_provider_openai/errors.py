"""The errors the OpenAI-compatible provider raises, all rooted at the core's error family.

Every message says what went wrong and what to do next. None of them ever
contains the API key: server messages are passed through
:func:`scrub`, which removes the key if a server echoes it, and URLs are
shown through :func:`agentium_provider_openai.config.redact_url`.
"""

from __future__ import annotations

import json

from agentium_harness import AgentiumError, ProviderError

__all__ = [
    "OpenAIConfigError",
    "OpenAIConnectionError",
    "OpenAIEmbeddingReplyError",
    "OpenAIIncompleteReplyError",
    "OpenAIMalformedReplyError",
    "OpenAIProviderError",
    "OpenAIReplyLimitError",
    "OpenAIRetriesExhaustedError",
    "OpenAIStatusError",
    "OpenAIStreamingOnlyError",
    "scrub",
]

#: At most this much of a server's error text is quoted in a message.
MAX_QUOTED_CHARS = 500


def _quoted_forms(secret: str) -> list[str]:
    r"""``secret`` as text may quote it, longest first: itself, and escaped as JSON or ``repr()`` does.

    A key holding a backslash, a quote or a slash is written otherwise inside a
    JSON string (``\\``, ``\"``, and ``\/`` by some encoders) and in a Python
    ``repr()`` (the ``openai`` 1.x and 2.x error message quotes an error body so):
    replaced as only itself, such a copy of it was quoted whole.
    """
    as_json = json.dumps(secret, ensure_ascii=False)[1:-1]
    forms = {secret, as_json, as_json.replace("/", "\\/"), repr(secret)[1:-1], ascii(secret)[1:-1]}
    return sorted(forms, key=len, reverse=True)


def scrub(text: str, secret: str | None, limit: int = MAX_QUOTED_CHARS) -> str:
    r"""``text`` as a message may quote it: ``secret`` (the API key) replaced by ``***``.

    So is the key escaped as JSON or ``repr()`` would quote it (see :func:`_quoted_forms`).

    Then whitespace runs become one space, every other character that does
    not print (escape sequences, bidi controls, a lone surrogate) is shown
    escaped (``\x1b``), and the result is cut to ``limit`` characters
    (default :data:`MAX_QUOTED_CHARS`). The key is replaced before anything
    is cut, so no part of it is ever left at a cut.
    """
    if secret:
        for form in _quoted_forms(secret):
            text = text.replace(form, "***")
    text = " ".join(text.split())
    if not text.isprintable():
        # repr() escapes exactly what isprintable() refuses; a terminal or a log
        # viewer then shows the server's text instead of obeying it.
        text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OpenAIConfigError(AgentiumError, ValueError):
    """The provider cannot work as configured: the variable ``api_key_env`` names is unset or empty.

    Set the variable (``export OPENAI_API_KEY=...``) or, for a server that needs
    no key, set ``api_key_env = ""``. The message names the variable, never a value.
    It is raised too when the key holds a character no HTTP header carries (a
    space, a line break, a non-ASCII character), and, on the first call, when
    the HTTP client refuses ``base_url``'s host name.
    """


class OpenAIProviderError(ProviderError):
    """The OpenAI-compatible endpoint could not give a usable answer. The session was not changed.

    The subclasses name the causes; this class itself covers a server that
    could not be reached at all (``status`` is ``None``).
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        self.status = status
        self.attempts = attempts
        super().__init__(message)


class OpenAIConnectionError(OpenAIProviderError):
    """The connection failed: the server could not be reached, or the answer broke off while it arrived.

    A body cut short (the server closed the connection mid-answer) or that
    cannot be decoded (a corrupt ``Content-Encoding``) is this error too.
    ``status`` is ``None``. A call retries it like any connection error, so a
    call that gives up raises :class:`OpenAIRetriesExhaustedError`; the health
    probe, which does not retry, raises this error itself.
    """


class OpenAIStatusError(OpenAIProviderError):
    """The server refused the request with an HTTP status that retrying cannot fix (400, 401, 404, …).

    ``status`` is the HTTP status. Check the model name, ``base_url`` and the
    key; a 400 often means the server does not support a field that was sent
    (tools, ``developer`` role, an ``extra_body`` field).
    """


class OpenAIRetriesExhaustedError(OpenAIProviderError):
    """Every attempt failed with a retryable failure, or the next wait would pass the deadline.

    Retryable failures are HTTP 429, 500, 502, 503, 504, connection errors and
    an attempt's timeout. ``attempts`` is how many requests were sent; ``status`` the last HTTP status
    (``None`` for a connection failure). Raise ``max_retries`` or the runtime's
    ``op_timeout_s``, or check the server's load.
    """


class OpenAIMalformedReplyError(OpenAIProviderError):
    """The server answered 200 but the body is not a usable chat completion.

    For example: no JSON object, no ``choices``, a message that is not an
    object, a tool call whose ``arguments`` are not a JSON object, or a tool
    call without an id or name. Nothing from the reply was used; no tool ran.
    """


class OpenAIReplyLimitError(OpenAIMalformedReplyError):
    """The server's answer is past one of the provider's reply limits. Nothing from it was used; no tool ran.

    ``limit`` names the option (``max_reply_bytes``, ``max_tool_arguments_bytes``
    or ``max_tool_arguments_depth``) and ``value`` its setting. A body past
    ``max_reply_bytes`` is refused while it arrives, before any of it is
    parsed. Raise the option if such answers are expected, or lower what the
    model may produce (``max_completion_tokens``, the tool's schema).
    """

    def __init__(self, message: str, *, limit: str, value: int) -> None:
        self.limit = limit
        self.value = value
        super().__init__(message)


class OpenAIIncompleteReplyError(OpenAIProviderError):
    """The server says its answer is incomplete: ``finish_reason`` ``"length"`` or ``"content_filter"``.

    ``finish_reason`` is the server's value; ``tool_calls`` how many tool calls
    the cut-off answer held. None of them ran (their arguments may be cut off
    too) and nothing of the answer was used. For ``"length"``, raise
    ``max_completion_tokens`` (or the server's own output limit) or shorten the
    request; ``"content_filter"`` is the server's moderation.
    """

    def __init__(self, message: str, *, finish_reason: str, tool_calls: int) -> None:
        self.finish_reason = finish_reason
        self.tool_calls = tool_calls
        super().__init__(message)


class OpenAIStreamingOnlyError(OpenAIProviderError):
    """The server answered with an event stream (``text/event-stream``), or refused a non-streamed request.

    This provider sends non-streamed Chat Completions requests
    (``"stream": false``) and needs one JSON answer. Configure the server to
    serve non-streamed requests, or put an OpenAI-compatible proxy in front of it.
    """


class OpenAIEmbeddingReplyError(OpenAIProviderError):
    """The server's embeddings answer is unusable; nothing of it was used.

    Causes: not JSON, too many or too few embeddings, an index out of range
    or repeated, a vector of another dimension than configured, or a value
    that is not a finite number.

    Check ``model`` and ``dimension`` against what the server serves.
    """
