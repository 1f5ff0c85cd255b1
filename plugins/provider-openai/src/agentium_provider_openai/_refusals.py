"""A server's refusals: error answers (any status but 2xx) read within ``max_reply_bytes``; their errors.

The ``openai`` client reads an error answer's body itself, whole and in
memory, before it raises ``APIStatusError``: a hostile or broken server could
send a body of any size (or one that expands without bound from its
``Content-Encoding``) with a 500. So a client the provider owns reads error
answers first, in an HTTP response hook (:func:`error_answer_hook`): at most
``max_reply_bytes`` of the decoded body, never more (inflated by
:func:`read_body` a bounded piece at a time); a longer body is cut there,
the connection closed, and a WARNING logged. The hook then raises
:class:`ErrorAnswer`, which :func:`refusal` turns into the status, headers
and (scrubbed) server message that the provider retries or reports. A lent
client's ``APIStatusError`` goes through :func:`refusal` the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from agentium_harness.plugin_api import InvalidJSONError, decode_json

from ._bodies import BodyBroken, UnsupportedCoding, read_body
from ._failures import STREAMING_ONLY
from .config import REPLY_ENVELOPE_DEPTH
from .errors import (
    OpenAIConnectionError,
    OpenAIProviderError,
    OpenAIStatusError,
    OpenAIStreamingOnlyError,
    scrub,
)

__all__ = ["ErrorAnswer", "broke_off", "error_answer_hook", "refusal", "status_error", "unreachable"]

logger = logging.getLogger("agentium.plugins.provider_openai")

#: The statuses whose refusal may mean "this server serves only streamed requests".
_STREAMING_STATUSES: Final = frozenset({400, 404, 405, 415, 422})


class ErrorAnswer(Exception):
    """An answer with a status other than 2xx, its body read (at most ``max_reply_bytes``) by the hook.

    ``truncated`` is true when the body was longer and was not read past the cap.
    """

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes, truncated: bool) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.truncated = truncated
        super().__init__(f"HTTP {status}")


def broke_off(exc: BaseException, secret: str | None) -> str:
    """What a transport failure while an error answer's body arrived says (scrubbed of the key)."""
    return f"broke off its error answer ({type(exc).__name__}: {scrub(str(exc), secret)})"


def error_answer_hook(
    limit: int, where: Callable[[], str], secret: str | None
) -> Callable[[Any], Awaitable[None]]:
    """An HTTP ``response`` hook: it reads an error answer within ``limit`` and raises :class:`ErrorAnswer`.

    A 2xx answer is left alone: the provider reads it itself, capped, and refuses one past the cap.
    """

    async def hook(response: Any) -> None:
        status = int(response.status_code)
        if 200 <= status < 300:
            return
        body = b""
        declared = response.headers.get("content-length", "")
        truncated = declared.isascii() and declared.isdigit() and int(declared) > limit
        if not truncated:
            try:
                # Inflated here a bounded piece at a time: capped at what it expands to, never a chunk whole.
                body, truncated = await read_body(response, limit)
            except UnsupportedCoding:
                await response.aclose()  # a coding not asked for: the status decides, without its message
            except BodyBroken as exc:
                raise OpenAIConnectionError(
                    f"the server at {where()} broke off its error answer ({scrub(exc.detail, secret)})"
                ) from None
        if truncated:
            await response.aclose()
            logger.warning(
                "the server answered HTTP %d with an error body past max_reply_bytes=%d; not read further",
                status,
                limit,
                extra={"agentium_http_status": status},
            )
        raise ErrorAnswer(status, response.headers, body, truncated)

    return hook


def _message(body: bytes) -> str | None:
    """The server's own ``error.message`` (or top-level ``message``) in an error body, if it has one."""
    try:
        data = decode_json(body, max_depth=REPLY_ENVELOPE_DEPTH, max_bytes=max(len(body), 1))
    except InvalidJSONError:
        return None
    error = data.get("error", data) if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else None


def refusal(exc: BaseException, secret: str | None, limit: int) -> tuple[int, Mapping[str, str], str] | None:
    """The status, headers and scrubbed server message of an error answer, or ``None`` if ``exc`` is not one.

    ``exc`` is the owned client's :class:`ErrorAnswer` (raised as is by openai 3,
    as the cause of an ``APIConnectionError`` by earlier releases) or a lent
    client's ``APIStatusError``.
    """
    import openai

    if isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, ErrorAnswer):
        exc = exc.__cause__
    if isinstance(exc, ErrorAnswer):
        message = _message(exc.body)
        detail = scrub(message, secret) if message else f"Error code: {exc.status}"
        if exc.truncated:
            detail += f" (its body passed max_reply_bytes={limit} and was not read further)"
        return exc.status, exc.headers, detail
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        said = body.get("message") if isinstance(body, dict) else None
        return (
            exc.status_code,
            exc.response.headers,
            scrub(said if isinstance(said, str) else str(exc.message), secret),
        )
    return None


def unreachable(exc: BaseException, where: str) -> OpenAIConnectionError:
    """The probe's error for a connection failure ``exc`` (not an error answer) at ``where``.

    The hook's own :class:`OpenAIConnectionError` (an error answer that broke off) is that error:
    openai 1.x and 2.x wrap what a hook raises in their ``APIConnectionError``, which said only
    "could not be reached" of a server that did answer.
    """
    cause = exc.__cause__
    if isinstance(cause, OpenAIConnectionError):
        return cause
    return OpenAIConnectionError(f"the server at {where} could not be reached ({type(exc).__name__})")


def status_error(status: int, detail: str, where: str, model: str) -> OpenAIProviderError:
    """The typed error for a refusal that retrying cannot fix (``detail`` already scrubbed)."""
    if status in _STREAMING_STATUSES and STREAMING_ONLY.search(detail):
        return OpenAIStreamingOnlyError(
            f"the server at {where} refused a non-streamed request (HTTP {status}: {detail}); "
            "this provider needs non-streamed Chat Completions",
            status=status,
        )
    hint = {
        401: "check the API key in the variable api_key_env names",
        403: "the key is not allowed to use this model or endpoint",
        404: f"check base_url and that the server serves model {model!r}",
    }.get(status, "the request was not accepted")
    return OpenAIStatusError(
        f"the server at {where} answered HTTP {status}: {detail} ({hint})", status=status
    )
