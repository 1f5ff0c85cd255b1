"""The S3 link: one boto3 client, used from worker threads behind a capacity limiter.

Why not the core's :class:`~agentium_harness.plugin_api.ThreadBoundAdapter`:
it runs one call at a time on one connection, which suits SQLite. A boto3
client is thread-safe and an eviction uploads many groups, so the link lets up
to ``max_concurrency`` requests run at once and keeps the rest of that base's care:

- **Any event loop.** One adapter object serves threads that each run their
  own event loop (and successive ``anyio.run`` calls): a loop's callers wait
  on that loop's own :class:`anyio.CapacityLimiter` (an anyio limiter belongs
  to one loop; ``PerLoop``), and a thread semaphore in the worker thread
  keeps the whole adapter within ``max_concurrency`` requests.

- **Lazy client.** Building an adapter does no I/O; the first call creates
  the client (from :class:`~agentium_archive_s3.config.S3Config`: endpoint,
  region, credentials from the config or boto3's standard chain).
- **Owned or lent.** A client the link created is closed by :meth:`S3Link.aclose`;
  a client the host lent is never closed (its event handlers are removed).
  ``aclose`` waits at most ``close_timeout_s`` for requests still running;
  past it they keep the client, and the last of them closes it as it ends.
- **Cancellation.** The context is checked before a call, again in its worker
  thread, and before every HTTP attempt (a ``before-send`` event handler), so a
  cancelled or expired operation sends no further request — botocore's own
  retries included. A boto3 request cannot be interrupted, so a cancelled
  caller returns at once and the thread's result is discarded; the thread
  checks a child of the caller's signal that the caller cancels as it leaves,
  so a caller cancelled by its own cancel scope (its context still live)
  stops the thread's requests too. A write already in its ``before-send``
  check or on the wire is what the adapters' write fence (:mod:`.erasure`)
  makes an erase wait for.
- **Unanswered attempts.** An HTTP attempt that was sent and got no answer
  (a read timeout, a connection dropped after sending) may still reach the
  server later, after botocore retried it or gave up, and after the thread
  returned: a ``needs-retry`` event handler counts such attempts per thread
  (:meth:`S3Link.unanswered`), so the write fence keeps their session in
  flight for as long as one request may take.
- **Typed errors.** botocore's exceptions become the plugin's errors
  (:mod:`agentium_archive_s3.errors`) with messages that name the bucket,
  the operation and S3's error code, and never a credential.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import anyio.to_thread
import attrs

# botocore.exceptions is cheap (tens of ms); boto3 and botocore.config pull in the whole client
# machinery, so make_client imports them: listing plugins (``agentium plugins``) need not pay.
import botocore.exceptions

from agentium_harness import AgentiumError, InvalidArgumentError
from agentium_harness.plugin_api import (
    CloseOnce,
    OpContext,
    OperationCancelledError,
    PerLoop,
    ThreadSafeEvent,
)

from .config import S3Config, redact_endpoint
from .errors import (
    S3AccessDeniedError,
    S3BucketNotFoundError,
    S3Error,
    S3UnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

__all__ = [
    "S3Client",
    "S3Link",
    "conflict_backoff",
    "continuation",
    "error_code",
    "error_status",
    "make_client",
    "unquote_etag",
]

T = TypeVar("T")

# The plugin's logger (observe.py's), for a close whose first caller was cancelled.
_log = logging.getLogger("agentium.plugins.archive_s3")

_DENIED: Final = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
    }
)
_UNAVAILABLE: Final = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "503",
        "500",
    }
)
_CONNECTION_ERRORS: Final = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
)
_NO_CREDENTIALS: Final = (
    botocore.exceptions.NoCredentialsError,
    botocore.exceptions.PartialCredentialsError,
)


def error_code(exc: BaseException) -> str:
    """S3's error code of a ``ClientError`` (``"NoSuchKey"``, ``"PreconditionFailed"``...), else ``""``."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def error_status(exc: BaseException) -> int | None:
    """The HTTP status of a ``ClientError``, else ``None``."""
    if isinstance(exc, botocore.exceptions.ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if isinstance(status, int) else None
    return None


def make_client(config: S3Config) -> S3Client:
    """A new boto3 S3 client for ``config`` (no request is sent).

    botocore's ``standard`` retry mode retries 5xx, throttling and dropped
    connections up to ``max_attempts``; checksums are computed only where an
    operation requires one (this plugin sends its own SHA-256 and MD5 on every
    upload), because S3-compatible servers differ on botocore's newer defaults.
    """
    import boto3.session
    import botocore.config

    session = boto3.session.Session(profile_name=config.profile)
    client_config = botocore.config.Config(
        region_name=config.region,
        connect_timeout=config.connect_timeout_s,
        read_timeout=config.read_timeout_s,
        retries={"total_max_attempts": config.max_attempts, "mode": "standard"},
        max_pool_connections=max(10, config.max_concurrency),
        s3={"addressing_style": config.addressing_style},  # type: ignore[arg-type]  # a str, not the Literal
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        user_agent_extra="agentium-archive-s3",
    )
    client: S3Client = session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        aws_session_token=config.session_token,
        config=client_config,
    )
    return client


class _CallState(threading.local):
    """The context of the call a worker thread is running, for the ``before-send`` handler."""

    ctx: OpContext | None = None
    operation: str = ""
    #: HTTP attempts this thread sent that got no answer (they may still land); only ever grows.
    unanswered: int = 0


def _base_client() -> type:
    """The base class of botocore's clients, imported on first use (it pulls in the client machinery)."""
    import botocore.client

    return botocore.client.BaseClient


class S3Link:
    """A lazily created (or lent) boto3 client, run in worker threads, ``max_concurrency`` at a time.

    ``family`` is the adapter's error class for failures no narrower plugin
    error covers (:class:`~agentium_archive_s3.errors.S3ArchiveError` or
    :class:`~agentium_archive_s3.errors.S3SessionStoreError`).
    """

    def __init__(
        self, config: S3Config, client: S3Client | None, *, family: type[S3Error], name: str
    ) -> None:
        # Checked here, for both adapters: a dict of options raised a bare AttributeError below.
        if not isinstance(config, S3Config):
            raise InvalidArgumentError(f"config must be an S3Config, got {type(config).__name__}")
        # A lent client of another kind failed only at the first call, with a bare AttributeError.
        # Imported only when a client is lent: listing plugins must not load botocore's client.
        if client is not None and not (
            isinstance(client, _base_client()) and client.meta.service_model.service_name == "s3"
        ):
            raise InvalidArgumentError(
                f"client must be a boto3 S3 client (boto3.client('s3')), got {type(client).__name__}"
            )
        self.config = config
        self.family = family
        self.name = name
        self._client: S3Client | None = client
        self._owned = client is None
        self._hooked = False
        # aclose() from any task, thread or loop: exactly one starts the close (two threads closing at
        # once each started a close thread); the others wait for its end, and all hear its outcome.
        self._closing = CloseOnce(name, wait_s=config.close_timeout_s + 1.0, logger=_log)
        self._lock = threading.Lock()
        self._state = _CallState()
        self._hook_id = f"agentium-archive-s3-{id(self)}"
        # One limiter per event loop (it belongs to its loop), and one semaphore for the adapter.
        self._limiters: PerLoop[anyio.CapacityLimiter] = PerLoop(
            lambda: anyio.CapacityLimiter(config.max_concurrency)
        )
        self._slots = threading.BoundedSemaphore(config.max_concurrency)
        self._busy = 0
        self._idle = threading.Condition(self._lock)

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """The current event loop's limiter (call from async code)."""
        return self._limiters.get()

    @property
    def owns_client(self) -> bool:
        """True when the link created its client (and closes it); False for a lent client."""
        return self._owned

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran; later calls are refused."""
        return self._closing.claimed

    def describe(self) -> str:
        """Bucket and endpoint, for messages (no credentials)."""
        return f"bucket {self.config.bucket!r} at {redact_endpoint(self.config.endpoint_url)}"

    # -- the client -----------------------------------------------------------------------------

    def _get_client(self) -> S3Client:
        with self._lock:
            if self._client is None:
                self._client = make_client(self.config)
            if not self._hooked:
                # Checked before every HTTP attempt, botocore's retries included.
                self._client.meta.events.register(
                    "before-send.s3", self._before_send, unique_id=self._hook_id
                )
                # After every attempt, the last included (botocore emits it whether or not it retries).
                # A unique id of its own: botocore ignores a second handler under the same id.
                self._client.meta.events.register(
                    "needs-retry.s3", self._after_attempt, unique_id=f"{self._hook_id}-attempt"
                )
                self._hooked = True
            return self._client

    def _before_send(self, **kwargs: Any) -> None:
        ctx = self._state.ctx
        if ctx is not None:
            # Raised through botocore to the caller: no request leaves after the deadline.
            ctx.raise_if_expired(self._state.operation)

    def _after_attempt(self, caught_exception: BaseException | None = None, **kwargs: Any) -> None:
        # An HTTPClientError (read timeout, connection closed or reset) comes after the request was
        # sent, perhaps whole: the server may act on it later. A failure to connect (botocore's
        # ConnectionError family) sent nothing; a response, even an error, was answered. Returns
        # None: the retry handler alone decides whether to retry.
        if isinstance(caught_exception, botocore.exceptions.HTTPClientError):
            self._state.unanswered += 1

    def unanswered(self) -> int:
        """How many HTTP attempts the calling worker thread sent that got no answer (so far)."""
        return self._state.unanswered

    # -- running requests -----------------------------------------------------------------------

    def refuse_if_closed(self, operation: str) -> None:
        """Raise the adapter's error (code ``closed``) once :meth:`aclose` ran.

        :meth:`call` checks it; an operation that waits before its first call
        (a load or an erase waiting on the write fence) checks it first too:
        a write left running past ``aclose`` would otherwise hold it up.
        """
        if self._closing.claimed:
            raise self.family(f"{self.name}: {operation} refused: the adapter is closed", code="closed")

    async def call(self, ctx: OpContext, operation: str, work: Callable[[S3Client], T]) -> T:
        """Run ``work(client)`` in a worker thread within the limiter, honouring ``ctx``.

        :raises OperationCancelledError: cancelled or past the deadline before
            or while waiting (nothing more is sent).
        :raises S3Error: the request failed (see :meth:`translate`).
        """
        ctx.raise_if_expired(operation)
        self.refuse_if_closed(operation)
        left = ctx.time_left()
        # The thread checks a signal of its own, cancelled as soon as this caller stops waiting for
        # any reason (its deadline, or a cancel scope of its caller with the context still live):
        # an abandoned thread then sends no further request, even one still waiting for a slot.
        inner = attrs.evolve(ctx, signal=ctx.signal.child())
        with anyio.move_on_after(math.inf if left is None else left) as scope:
            try:
                return await anyio.to_thread.run_sync(
                    self._in_thread, inner, operation, work, limiter=self.limiter, abandon_on_cancel=True
                )
            finally:
                # After a normal return the thread is done, and this changes nothing.
                inner.signal.cancel("its caller stopped waiting")
        assert scope.cancelled_caught
        raise OperationCancelledError(
            f"{operation} stopped at its deadline; a request already sent may still complete on the server",
            "deadline passed",
        )

    def _in_thread(self, ctx: OpContext, operation: str, work: Callable[[S3Client], T]) -> T:
        ctx.raise_if_expired(operation)
        left = ctx.time_left()
        # Across event loops too, at most max_concurrency requests at once (waiting within the deadline).
        if not self._slots.acquire(timeout=None if left is None else max(0.0, left)):
            raise OperationCancelledError(
                f"{operation} stopped: its deadline passed waiting for a slot", "deadline passed"
            )
        try:
            return self._in_slot(ctx, operation, work)
        finally:
            self._slots.release()

    def _in_slot(self, ctx: OpContext, operation: str, work: Callable[[S3Client], T]) -> T:
        ctx.raise_if_expired(operation)
        with self._lock:
            self.refuse_if_closed(operation)
            self._busy += 1
        self._state.ctx, self._state.operation = ctx, operation
        try:
            return work(self._get_client())
        except AgentiumError:
            raise
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            if ctx.expired:
                reason = ctx.signal.reason or "deadline passed"
                raise OperationCancelledError(f"{operation} stopped: {reason}", reason) from exc
            raise self.translate(operation, exc) from None
        finally:
            self._state.ctx = None
            with self._lock:
                self._busy -= 1
                self._idle.notify_all()
                if self._closing.claimed and self._busy == 0:
                    # The last request running past aclose's wait lets go of the client it kept.
                    self._release()

    def translate(self, operation: str, exc: BaseException) -> S3Error:
        """The plugin error for a botocore exception; the message never holds a credential.

        ``from None`` at the raise site keeps botocore's own exception (whose
        text is the server's) out of the traceback's chained message.
        """
        where = f"{self.name}: {operation} on {self.describe()}"
        code, status = error_code(exc), error_status(exc)
        if isinstance(exc, _NO_CREDENTIALS):
            return S3AccessDeniedError(
                f"{where} failed: no usable credentials (set access_key_id / secret_access_key, or "
                "configure boto3's standard chain)",
                code="NoCredentials",
            )
        if isinstance(exc, _CONNECTION_ERRORS):
            return S3UnavailableError(
                f"{where} failed: the server could not be reached or dropped the connection "
                f"({type(exc).__name__}) after {self.config.max_attempts} attempt(s)",
                code=type(exc).__name__,
            )
        if not isinstance(exc, botocore.exceptions.ClientError):
            return self.family(f"{where} failed: {type(exc).__name__}", code=type(exc).__name__)
        shown = f"{code or '?'} (HTTP {status if status is not None else '?'})"
        if code == "NoSuchBucket" or (code in ("404", "NotFound") and operation.endswith("bucket check")):
            return S3BucketNotFoundError(
                f"{where} failed: the bucket does not exist ({shown}); create it first, the adapters "
                "never create buckets",
                code="NoSuchBucket",
                status=status,
            )
        if code in _DENIED or status == 403:
            return S3AccessDeniedError(
                f"{where} failed: the server refused the credentials or the request ({shown}); check "
                "the access key, the secret and the bucket policy",
                code=code,
                status=status,
            )
        if code in _UNAVAILABLE or (status is not None and status >= 500):
            return S3UnavailableError(
                f"{where} failed: the server kept answering {shown} after {self.config.max_attempts} "
                "attempt(s)",
                code=code,
                status=status,
            )
        return self.family(f"{where} failed: {shown}", code=code, status=status)

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close an owned client once no request uses it; a lent client only loses the event handlers.

        Idempotent and shielded from the caller's cancellation, for at most
        ``close_timeout_s`` (whatever ``read_timeout_s`` is): requests still
        running then (in threads their callers abandoned, or whose callers
        still wait) keep the client, events and all, and the last of them
        closes it as it finishes. Nothing is cut: a write on the wire
        completes, and its caller hears whether it landed. The wait runs in
        a thread of its own, outside anyio's default pool, so a full pool cannot hold it.
        A second ``aclose()`` while the first is closing (from any task,
        thread or loop) returns once the first has done its work, waiting at
        most a second past ``close_timeout_s``: returning at once, it told its caller the
        client was closed while it was still open. Every caller hears the same
        outcome (``plugin_api.CloseOnce``): the close's failure is raised to each,
        and when the first caller was cancelled by a native ``Task.cancel()``
        (which anyio's shield does not stop on asyncio) it is logged as a
        WARNING and raised to the next ``aclose()``; the close goes on meanwhile.
        """
        await self._closing.run(self._close)

    def _close(self) -> Awaitable[None]:
        """Start the close's thread now, in the first ``aclose()`` caller; the close ends with it."""
        # A thread started here always runs, and says when it has ended (a wait in a worker thread of
        # anyio's may never start once its caller is cancelled): whoever waits, the close is done then.
        # Started before anything is awaited: in the close's asyncio task, a loop that ended as that task
        # was made (asyncio.run returning) cancelled it before its first step, and nothing released.
        ended = ThreadSafeEvent()
        failure: list[Exception] = []

        def close_in_thread() -> None:
            try:
                with self._lock:
                    # Bounded on its own: read_timeout_s (up to an hour, times max_attempts) held every close.
                    if self._idle.wait_for(lambda: self._busy == 0, timeout=self.config.close_timeout_s):
                        self._release()
            except Exception as exc:  # raised to aclose()'s callers (not left to the thread's excepthook)
                failure.append(exc)
            finally:
                ended.set()

        threading.Thread(target=close_in_thread, name="agentium-archive-s3-close", daemon=True).start()

        async def closed() -> None:
            await ended.wait()
            if failure:
                raise failure[0]  # the client's close failed

        return closed()

    def _release(self) -> None:
        """Unhook and (when owned) close the client; the caller holds ``_lock``. Idempotent."""
        client, hooked = self._client, self._hooked
        self._hooked = False
        if client is None:
            return
        if hooked:
            client.meta.events.unregister("before-send.s3", unique_id=self._hook_id)
            client.meta.events.unregister("needs-retry.s3", unique_id=f"{self._hook_id}-attempt")
        if self._owned:
            self._client = None
            client.close()


def continuation(page: Any, marker: str, what: str) -> str | None:
    """The ``marker`` field of a listing page to read on from; ``None`` on the last page.

    A page saying it is not the last without one was read as the end, and a
    partial listing taken for the whole (an erase reporting complete with
    objects left): :class:`~agentium_archive_s3.errors.S3UnavailableError`
    (code ``ListingIncomplete``) instead. ``what`` names the listing.
    """
    if not page.get("IsTruncated"):
        return None
    token = page.get(marker)
    if not token:
        raise S3UnavailableError(
            f"{what}: the server says the listing goes on but gave no {marker} to read on with; "
            "nothing was taken from a partial listing",
            code="ListingIncomplete",
        )
    return str(token)


def unquote_etag(etag: str) -> str:
    """An ETag without the double quotes S3 puts around it."""
    return etag[1:-1] if len(etag) >= 2 and etag[0] == etag[-1] == '"' else etag


def conflict_backoff(ctx: OpContext, attempt: int) -> None:
    """Sleep (in the worker thread) before retrying a 409, never past the deadline."""
    delay = min(1.0, 0.02 * 2**attempt) * (0.5 + random.random() / 2)  # jitter, not crypto
    left = ctx.time_left()
    time.sleep(delay if left is None else min(delay, left))
