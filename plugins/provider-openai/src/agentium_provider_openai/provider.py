"""The OpenAI-compatible model provider: one Chat Completions call per model step.

How a call is bounded. The whole call — every attempt and every wait between
attempts — runs inside one cancel scope that ends at the operation's deadline,
and a watcher cancels it as soon as the operation's signal is cancelled; each
attempt is also bounded by ``timeout_s``. The official client is used with
``max_retries=0`` (a lent client through ``with_options``): retrying is done
here, so that it is bounded by ``max_retries``, limited to retryable failures
(HTTP 429, 500, 502, 503, 504, connection errors, an attempt's timeout) and
never waits past the deadline. A call cut off by the deadline or the signal
raises :class:`OperationCancelledError`; nothing partial is returned.

Owned versus lent. A provider built from config creates its
``AsyncOpenAI`` client on first use and closes it in :meth:`aclose` (the
runtime closes config-built adapters). A client the host lends is never
closed, and its own retry setting is bypassed as above.

Any event loop. An ``AsyncOpenAI`` client's connection pool belongs to the
event loop that opened its connections, and one provider object serves
threads that each run their own loop (and successive ``anyio.run`` calls).
So an owned provider keeps one client per loop (``PerLoop``), made on that
loop's first call, dropped once the loop has finished, and closed each on
its own loop by :meth:`aclose`. A lent client is the host's: use it from the
loop it belongs to.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import anyio

from agentium_harness import InvalidArgumentError, OperationCancelledError
from agentium_harness.plugin_api import (
    CloseOnce,
    InvalidJSONError,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    PerLoop,
    ProviderCapabilities,
    decode_json,
)

from ._bodies import ACCEPT_ENCODING, ASKED_CODINGS, BodyBroken, UnsupportedCoding, read_body
from ._calls import ProviderCalls
from ._failures import Retryable, attempt_event, forget_hidden_context, is_transport_error, retry_after
from ._library import is_openai_client, load_openai, openai_loaded
from ._refusals import ErrorAnswer, broke_off, error_answer_hook, refusal, status_error, unreachable
from .config import HEADER_TOKEN, REPLY_ENVELOPE_DEPTH, OpenAIProviderConfig, read_key, redact_url
from .errors import (
    OpenAIConfigError,
    OpenAIConnectionError,
    OpenAIIncompleteReplyError,
    OpenAIMalformedReplyError,
    OpenAIProviderError,
    OpenAIReplyLimitError,
    OpenAIRetriesExhaustedError,
    OpenAIStreamingOnlyError,
    scrub,
)
from .wire import check_sendable, decode_reply, parse_completion, request_messages, request_tools

if TYPE_CHECKING:
    # The client library is imported where a client is made or its errors are caught, not when
    # the plugin loads: listing plugins must not pay for it (a call loads it off the loop: _library).
    from openai import AsyncOpenAI

__all__ = ["NO_KEY", "RETRYABLE_STATUSES", "OpenAIProvider", "ProviderCalls"]

#: Retries and give-ups (WARNING); never the request or the server's error text.
logger = logging.getLogger("agentium.plugins.provider_openai")

T = TypeVar("T")

#: HTTP statuses worth another attempt: rate limiting and transient server trouble.
RETRYABLE_STATUSES: Final = frozenset({429, 500, 502, 503, 504})

#: The key sent to a server that needs none (the client requires some value).
NO_KEY: Final = "no-key"

#: How often the watcher looks at the operation's signal while a call is in flight.
_SIGNAL_POLL_S: Final = 0.02

#: How many model names the probe shows, and at most how many characters of each.
_PROBE_NAMES: Final = 10
_PROBE_NAME_CHARS: Final = 100

#: How long :meth:`OpenAIProvider.aclose` waits in all (the loops' clients close at once).
_CLOSE_S: Final = 10.0


class OpenAIProvider(ModelProvider):
    """A model provider for OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM).

    Build it from :class:`OpenAIProviderConfig`; building does no I/O. Pass
    ``client`` to lend an ``openai.AsyncOpenAI`` of your own (its base URL and
    key are then used, and it is never closed here). ``environ`` is where
    ``api_key_env`` is looked up (default :data:`os.environ`).
    """

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(
        tool_calls=True, deterministic=False, health_check=True
    )
    #: The provider as the GenAI conventions name it (``gen_ai.provider.name`` on ``chat`` spans).
    gen_ai_provider_name: ClassVar[str] = "openai"

    def __init__(
        self,
        config: OpenAIProviderConfig,
        *,
        client: AsyncOpenAI | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(config, OpenAIProviderConfig):
            raise InvalidArgumentError(f"config must be an OpenAIProviderConfig, got {type(config).__name__}")
        if client is not None and not is_openai_client(client):
            raise InvalidArgumentError(f"client must be an openai.AsyncOpenAI, got {type(client).__name__}")
        self._config = config
        self._owns_client = client is None
        # Who closes (one caller), and its outcome, which every aclose() caller hears.
        # A later caller waits a second past the close's own bound: waiting exactly that long (from before
        # the close began) it stopped as the close failed, and returned as if every client had closed.
        self._closing = CloseOnce("OpenAI provider", wait_s=_CLOSE_S + 1.0, logger=logger)
        # The lent client (a copy without retries), or None for an owned provider.
        self._client: AsyncOpenAI | None = None
        # An owned provider's clients, one per event loop (a client's connections belong to one loop).
        self._clients: PerLoop[AsyncOpenAI] = PerLoop(self._new_client)
        if client is None:
            self._api_key = read_key(config, os.environ if environ is None else environ)
        else:
            lent_key = getattr(client, "api_key", None)
            self._api_key = lent_key if isinstance(lent_key, str) else None
            if self._api_key and not HEADER_TOKEN.fullmatch(self._api_key):
                raise OpenAIConfigError("the lent client's api_key holds a character no HTTP header carries")
            # A copy sharing the host's connection pool, without its retries:
            # retries are ours, so they honour the deadline.
            self._client = client.with_options(max_retries=0)
        #: Requests sent (every attempt counts); for tests and diagnostics.
        self.attempts = 0

    @property
    def owns_client(self) -> bool:
        """True when the client was built from config (and is closed by :meth:`aclose`)."""
        return self._owns_client

    @property
    def client(self) -> AsyncOpenAI | None:
        """The client calls go through on the current event loop; ``None`` before its first use there.

        An owned provider has one client per event loop (``None`` outside a
        loop, and after :meth:`aclose`). For a lent client this is a copy
        (``with_options(max_retries=0)``) that shares the host's connection pool.
        """
        if self._client is not None or self._closing.claimed:
            return self._client
        return self._clients.peek()

    @property
    def config(self) -> OpenAIProviderConfig:
        """The options this provider was built with."""
        return self._config

    @property
    def gen_ai_request_model(self) -> str:
        """The model every request names (``gen_ai.request.model``; the span is ``chat {model}``)."""
        return self._config.model

    def __repr__(self) -> str:
        where = redact_url(self._config.base_url) if self._owns_client else "lent client"
        return f"OpenAIProvider(model={self._config.model!r}, {where})"

    # -- client ------------------------------------------------------------------

    def _get_client(self) -> AsyncOpenAI:
        if self._closing.claimed:
            raise OpenAIProviderError("the OpenAI provider was closed; build a new one")
        if self._client is not None:
            return self._client
        return self._clients.get()

    def calls(self) -> ProviderCalls:
        """What another endpoint's client (the embedder) uses of this provider: :class:`ProviderCalls`."""
        return ProviderCalls(
            client_for=self._client_for,
            where=self._where,
            api_key=self._api_key,
            bounded=self._bounded,
            attempts=self._attempts,
            read_capped=self._read_capped,
        )

    async def _client_for(self, ctx: OpContext, operation: str) -> AsyncOpenAI:
        """:meth:`_get_client`, ``openai`` imported first in a worker thread within ``ctx`` (see _library)."""
        if not (
            self._closing.claimed or self._client is not None or openai_loaded()
        ):  # lent: the host loaded it
            await self._bounded(ctx, operation, load_openai)
        return self._get_client()

    def _new_client(self) -> AsyncOpenAI:
        # Checked again here, under the lock PerLoop makes values under and aclose() collects them
        # under (it claims the close first): a call past _get_client's check as another thread closed
        # the provider built a client after the close had collected them, which nobody closed.
        if self._closing.claimed:
            raise OpenAIProviderError("the OpenAI provider was closed; build a new one")
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        config, key = self._config, self._api_key
        # A plain httpx client of our own, not the SDK's default wrapper: that one, once
        # dropped with its loop finished, closes itself from __del__ on whatever loop then
        # runs, on connections of another loop (errors raised into an unrelated task).
        # Ours is closed by aclose() on its own loop, or left to the garbage collector once
        # its loop has finished (its connections went with that loop).
        try:
            return AsyncOpenAI(
                api_key=self._api_key or NO_KEY,
                base_url=self._config.base_url,
                organization=self._config.organization,
                project=self._config.project,
                timeout=self._config.timeout_s,
                max_retries=0,
                # Redirects are not followed: a 3xx would re-send the whole conversation to wherever
                # it points (another host included). It is a status error naming the status instead.
                # The hook reads an error answer within max_reply_bytes before the client would read
                # it whole (see _refusals).
                http_client=DefaultAsyncHttpxClient(
                    timeout=self._config.timeout_s,
                    follow_redirects=False,
                    event_hooks={"response": [error_answer_hook(config.max_reply_bytes, self._where, key)]},
                ),
            )
        except Exception as exc:
            # A host name the HTTP library refuses (not valid IDNA): its own InvalidURL, untyped.
            if type(exc).__module__.partition(".")[0] not in ("httpx", "httpx2"):
                raise
            raise OpenAIConfigError(
                f"base_url {redact_url(config.base_url)!r} is not a URL the HTTP client accepts "
                f"({type(exc).__name__}); check its host name"
            ) from None

    def _where(self) -> str:
        client = self._client
        url = str(client.base_url) if client is not None else self._config.base_url
        return redact_url(url)

    # -- bounding ----------------------------------------------------------------

    async def _bounded(self, ctx: OpContext, operation: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` until it ends, the deadline passes or the signal is cancelled."""
        ctx.raise_if_expired(operation)
        left = ctx.time_left()
        box: list[T] = []
        failed: list[Exception] = []
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                # CancelSignal is a flag (it may be set from a worker thread or
                # read as expired by its deadline), so it is polled, not awaited.
                while not ctx.signal.cancelled:  # noqa: ASYNC110
                    await anyio.sleep(_SIGNAL_POLL_S)
                group.cancel_scope.cancel()

            group.start_soon(watch)
            with anyio.move_on_after(left if left is not None else float("inf")):
                try:
                    box.append(await work())
                except Exception as exc:  # raised below, outside the group, not as an ExceptionGroup
                    failed.append(exc)
            group.cancel_scope.cancel()
        if failed:
            raise forget_hidden_context(failed[0])
        if box:
            return box[0]
        if ctx.signal.cancelled and ctx.signal.reason != "deadline passed":
            raise OperationCancelledError(
                f"{operation} stopped: the operation was cancelled ({ctx.signal.reason}); "
                "the request was abandoned and nothing of it was used",
                ctx.signal.reason,
            )
        ctx.signal.cancel("deadline passed")
        raise OperationCancelledError(
            f"{operation} stopped: its deadline passed before the server answered; nothing of it was used",
            "deadline passed",
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = self._config.retry_backoff_max_s
        if retry_after is not None:
            return min(retry_after, cap)
        return float(min(self._config.retry_backoff_s * 2 ** (attempt - 1), cap))

    def _refusal(self, exc: BaseException) -> tuple[int, Mapping[str, str], str] | None:
        """The status, headers and scrubbed message of an error answer (see :func:`refusal`), or ``None``."""
        return refusal(exc, self._api_key, self._config.max_reply_bytes)

    async def _attempts(self, ctx: OpContext, operation: str, send: Callable[[float], Awaitable[T]]) -> T:
        """Call ``send(timeout)`` up to ``1 + max_retries`` times, retrying only retryable failures.

        A wait that would end past the deadline is not started: the last
        failure is reported at once instead of a bare "deadline passed".
        """
        import openai

        total = 1 + self._config.max_retries
        attempt = 0
        while True:
            attempt += 1
            self.attempts += 1
            # Not shortened to the time left: the deadline is the outer scope's
            # (see _bounded), so a call cut off by it reads as the deadline, not
            # as a retryable attempt timeout.
            timeout = self._config.timeout_s
            try:
                try:
                    with anyio.fail_after(timeout):
                        return await send(timeout)
                except TimeoutError:
                    raise Retryable(f"no answer within timeout_s={timeout:g}s") from None
                except (ErrorAnswer, openai.APIStatusError, openai.APIConnectionError) as exc:
                    refused = self._refusal(exc)
                    if refused is None:
                        raise Retryable(
                            f"connection failed ({type(exc).__name__}: {scrub(str(exc), self._api_key)})"
                        ) from None
                    status, headers, detail = refused
                    if status not in RETRYABLE_STATUSES:
                        raise status_error(status, detail, self._where(), self._config.model) from None
                    raise Retryable(f"HTTP {status}: {detail}", status, retry_after(headers)) from None
                except OpenAIConnectionError as exc:
                    # The body broke off after the headers (see _read_capped): as retryable as a
                    # connection that failed before them.
                    raise Retryable(f"connection failed ({exc})") from None
                except Exception as exc:
                    # An error answer's body is read by the client itself, which lets the HTTP
                    # library's own error through when that body breaks off or cannot be decoded.
                    if not is_transport_error(exc):
                        raise
                    raise Retryable(
                        f"connection failed (the server {broke_off(exc, self._api_key)})"
                    ) from None
            except Retryable as failure:
                if ctx.expired:
                    raise OperationCancelledError(
                        f"{operation} stopped: its deadline passed during attempt {attempt} "
                        f"({failure.detail}); nothing of it was used",
                        ctx.signal.reason or "deadline passed",
                    ) from None
                wait = self._backoff(attempt, failure.retry_after)
                why = ""
                if attempt >= total:
                    why = f"max_retries={self._config.max_retries}"
                elif (left := ctx.time_left()) is not None and wait >= left:
                    why = f"the next attempt, after {wait:g}s, would start past the deadline"
                if why:
                    logger.warning(
                        "%s failed after %d attempt(s) (%s); giving up: %s",
                        operation,
                        attempt,
                        failure.status or "no HTTP status",
                        why,
                        extra={"agentium_attempts": attempt, "agentium_http_status": failure.status},
                    )
                    attempt_event("agentium.openai.retries_exhausted", attempt, failure.status)
                    raise OpenAIRetriesExhaustedError(
                        f"{operation} failed after {attempt} attempt(s) at {self._where()}; "
                        f"last: {failure.detail} ({why})",
                        status=failure.status,
                        attempts=attempt,
                    ) from None
                # The detail stays out of the record: a server's error body may echo the request.
                logger.warning(
                    "%s attempt %d failed (%s); retrying in %.3gs",
                    operation,
                    attempt,
                    failure.status or "no HTTP status",
                    wait,
                    extra={"agentium_attempts": attempt, "agentium_http_status": failure.status},
                )
                attempt_event("agentium.openai.retry", attempt, failure.status)
                await anyio.sleep(wait)

    # -- the port ----------------------------------------------------------------

    def _body(self) -> dict[str, Any]:
        config = self._config
        body: dict[str, Any] = dict(config.extra_body)
        if config.temperature is not None:
            body["temperature"] = config.temperature
        if config.max_completion_tokens is not None:
            body["max_completion_tokens"] = config.max_completion_tokens
        if config.seed is not None:
            body["seed"] = config.seed
        return body

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """Send ``request`` as one non-streamed Chat Completions call and return the first choice.

        Raises :class:`InvalidArgumentError` (nothing sent) when the request
        holds text that is not valid Unicode (a lone surrogate), which no JSON
        body can carry. Raises :class:`OperationCancelledError` when cancelled or past the
        deadline (before sending or while waiting), and an
        :class:`OpenAIProviderError` subclass for every failure of the server
        or its answer; the engine reports either as a provider failure and
        changes nothing.
        """
        ctx.raise_if_expired("provider complete")
        client = await self._client_for(ctx, "provider complete")
        messages = request_messages(
            request,
            instructions_role=self._config.instructions_role,
            source_placement=self._config.source_placement,
        )
        tools = request_tools(request.tools)
        check_sendable(messages, tools)
        extra = self._body()
        optional: dict[str, Any] = {"tools": tools} if tools else {}

        async def send(timeout: float) -> ModelResponse:  # noqa: ASYNC109  # the client's own bound
            # A streamed raw response: the body is read here, chunk by chunk,
            # so a body past max_reply_bytes is refused before it is all in memory.
            async with client.chat.completions.with_streaming_response.create(
                model=self._config.model,
                messages=messages,  # type: ignore[arg-type]  # plain dicts in the wire format
                stream=False,
                timeout=timeout,
                extra_headers=ASKED_CODINGS,
                extra_body=extra or None,
                **optional,
            ) as raw:
                content_type = raw.headers.get("content-type", "")
                data = await self._read_capped(raw.http_response, "the chat completion")
            return self._parse(content_type, data)

        return await self._bounded(
            ctx, "provider complete", lambda: self._attempts(ctx, "provider complete", send)
        )

    async def _read_capped(self, response: Any, what: str) -> bytes:
        """The decoded body of ``response`` (httpx), or :class:`OpenAIReplyLimitError` past the cap.

        Inflated by :func:`read_body` a bounded piece at a time (never a chunk whole). A body that
        breaks off or whose coding is corrupt is :class:`OpenAIConnectionError` (retried); one in a
        coding not asked for is :class:`OpenAIMalformedReplyError`.
        """
        limit = self._config.max_reply_bytes

        def too_large(size: str) -> OpenAIReplyLimitError:
            return OpenAIReplyLimitError(
                f"the server at {self._where()} sent {what} of {size}, more than max_reply_bytes={limit}; "
                "it was not read further, nothing from it was used and no tool ran",
                limit="max_reply_bytes",
                value=limit,
            )

        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise too_large(f"{int(declared)} bytes (its Content-Length)")
        try:
            data, over = await read_body(response, limit)
        except UnsupportedCoding as exc:
            raise OpenAIMalformedReplyError(
                f"the server at {self._where()} sent {what} in {scrub(str(exc), self._api_key)}, which was "
                f"not asked for (only {ACCEPT_ENCODING}); nothing of it was read or used"
            ) from None
        except BodyBroken as exc:
            raise OpenAIConnectionError(
                f"the server at {self._where()} broke off {what} after {exc.received} bytes "
                f"({scrub(exc.detail, self._api_key)}); nothing of it was used"
            ) from None
        if over:
            raise too_large(f"more than {limit} bytes")
        return data

    def _parse(self, content_type: str, data: bytes) -> ModelResponse:
        if "text/event-stream" in content_type.lower() or data.lstrip().startswith(b"data:"):
            raise OpenAIStreamingOnlyError(
                f"the server at {self._where()} answered a non-streamed request with an event stream; "
                "this provider needs one JSON chat completion (configure the server to serve "
                '"stream": false requests)'
            )
        config = self._config
        body = decode_reply(
            data, max_tool_arguments_depth=config.max_tool_arguments_depth, secret=self._api_key
        )
        try:
            return parse_completion(
                body,
                max_tool_arguments_bytes=config.max_tool_arguments_bytes,
                max_tool_arguments_depth=config.max_tool_arguments_depth,
                secret=self._api_key,
            )
        except OpenAIIncompleteReplyError as exc:
            logger.warning(
                "the server cut its answer off (finish_reason %s); it was refused",
                exc.finish_reason,
                extra={"agentium_finish_reason": exc.finish_reason},
            )
            raise

    async def health(self, ctx: OpContext) -> str:
        """List the server's models (``GET /models``) within ``probe_timeout_s`` and the deadline.

        Returns how many models the server lists, the first few names (at
        most 10, each cut to 100 characters, control characters escaped) and
        whether the configured model is among them (a server such as
        llama.cpp may accept any name, so an unlisted model is reported, not
        failed). Raises an :class:`OpenAIProviderError` when the server cannot
        be reached in time or refuses.
        """
        ctx.raise_if_expired("provider health")
        client = await self._client_for(ctx, "provider health")
        bound = self._config.probe_timeout_s

        async def probe() -> str:
            import openai

            try:
                with anyio.fail_after(bound):
                    async with client.models.with_streaming_response.list(
                        timeout=bound, extra_headers=ASKED_CODINGS
                    ) as raw:
                        data = await self._read_capped(raw.http_response, "a model list")
            except TimeoutError:
                raise OpenAIProviderError(
                    f"the server at {self._where()} did not list its models within probe_timeout_s={bound:g}s"
                ) from None
            except (ErrorAnswer, openai.APIStatusError, openai.APIConnectionError) as exc:
                refused = self._refusal(exc)
                if refused is None:
                    raise unreachable(exc, self._where()) from None
                status, _, detail = refused
                raise status_error(status, detail, self._where(), self._config.model) from None
            except Exception as exc:
                if not is_transport_error(exc):  # an error answer's body broke off (see _attempts)
                    raise
                raise OpenAIConnectionError(
                    f"the server at {self._where()} {broke_off(exc, self._api_key)}; nothing of it was used"
                ) from None
            try:
                body = decode_json(data, max_depth=REPLY_ENVELOPE_DEPTH, max_bytes=len(data))
                items = body["data"]
                if not isinstance(items, list):
                    raise TypeError("data is not a list")
            except (InvalidJSONError, KeyError, TypeError):
                raise OpenAIMalformedReplyError(
                    f"the server at {self._where()} answered GET /models with no model list"
                ) from None
            if not all(isinstance(item, dict) and isinstance(item.get("id"), str) for item in items):
                raise OpenAIMalformedReplyError(
                    f"the server at {self._where()} answered GET /models with an entry that has no text id"
                )
            ids = sorted({item["id"] for item in items})
            more = len(ids) - _PROBE_NAMES
            # The names are the server's text, printed by `agentium check`: each is cut short and its
            # control characters (escape sequences, newlines) are shown escaped, not obeyed.
            names = [scrub(name, self._api_key, _PROBE_NAME_CHARS) for name in ids[:_PROBE_NAMES]]
            shown = ", ".join(names) + (f" (+{more} more)" if more > 0 else "")
            model = self._config.model
            listed = "listed" if model in ids else "not listed (the server may still accept it)"
            return f"{len(ids)} model(s) at {self._where()}: {shown or '-'}; model {model!r} {listed}"

        return await self._bounded(ctx, "provider health", probe)

    async def aclose(self) -> None:
        """Close the clients built from config, each on its own event loop; a lent client is left open.

        Idempotent. A client of a loop that has finished is dropped (its connections went with
        the loop). The clients close concurrently, so the whole close takes at most ``_CLOSE_S``
        however many loops are stuck; :class:`OpenAIProviderError` names each that did not close.
        A second ``aclose()`` while the first is closing (from any task, thread or loop) waits
        for the first's closes to end, at most a second longer; every caller hears the same
        outcome (``plugin_api.CloseOnce``): the first's :class:`OpenAIProviderError` is raised
        to later callers too, and to the next caller when the first was cancelled natively
        (the closes go on; a WARNING says they failed).
        """
        await self._closing.run(self._close_clients)

    def _close_clients(self) -> Awaitable[None]:
        """Forget the lent client now (in the first ``aclose()`` caller); close the owned ones."""
        self._client = None
        return self._close_owned()

    async def _close_owned(self) -> None:
        problems = await self._clients.aclose(lambda client: client.close(), _CLOSE_S)
        if problems:
            raise OpenAIProviderError("closing the OpenAI provider: " + "; ".join(problems))
