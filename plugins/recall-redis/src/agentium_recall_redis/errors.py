"""The errors the Redis recall store raises, all rooted at the core's :class:`AgentiumError`.

Every message says what went wrong and what to do next. None of them ever
contains a password or a URL's credentials: the server's location is always
shown through :func:`agentium_recall_redis.config.redact_url`.
"""

from __future__ import annotations

from agentium_harness import AgentiumError, OperationCancelledError, RecallUnavailableError

__all__ = [
    "RedisRecallAuthError",
    "RedisRecallConnectionError",
    "RedisRecallDamagedError",
    "RedisRecallError",
    "RedisRecallLayoutError",
    "RedisRecallServerError",
    "RedisRecallTimeoutError",
    "RedisRecallValueTooLargeError",
]


class RedisRecallError(AgentiumError):
    """The Redis recall store could not complete an operation, or was used after ``aclose()``.

    The subclasses name the common causes; this class itself covers a server
    reply the store cannot use (a script error, an out-of-memory refusal, a
    read-only replica, keys of the wrong type under the store's prefix).

    No message about a source names its id or its tenant's key prefix (both are
    content, shown only with capture): ``source_id`` holds the id (else ``""``).
    """

    #: The id of the damaged source the error is about, or ``""``; never part of the message.
    source_id: str = ""


class RedisRecallConnectionError(RedisRecallError):
    """The server could not be reached, or the connection broke or timed out before it answered.

    Check that the server runs at the configured URL (the message shows it
    without credentials) and that ``connect_timeout_s`` / ``socket_timeout_s``
    suit the network. A read that failed this way returned nothing; a write
    was settled first (see :class:`RedisRecallTimeoutError`).
    """


class RedisRecallDamagedError(RedisRecallError):
    """Stored data was changed behind the store's back in a way it cannot work around: nothing was assumed.

    Raised, for example, by an erase whose walk of the tenant's rows by number would have no bound but
    a row counter (``<tenant>:n``) past any the tenant's rows explain: the erase fails closed (what it
    could not walk is not said erased) and logs a WARNING. The message says which key and how to repair
    it; the README's "Erasure" section says more.
    """


class RedisRecallAuthError(RedisRecallConnectionError):
    """The server refused the credentials (a wrong password, an unknown or disabled ACL user).

    The password is never part of this message. Set the ``password`` option
    (for example ``password = "${REDIS_PASSWORD}"``) and ``username`` for an ACL user.
    """


class RedisRecallServerError(RedisRecallError, RecallUnavailableError):
    """The server cannot host the store: too old, no Lua scripting, or a command it needs is missing.

    Raised when the store first connects (its *open*), before anything is
    written. The store needs Redis >= 6.2 or Valkey with ``EVAL``/``EVALSHA``
    and every command listed in the message; a command disabled with
    ``rename-command`` counts as missing.
    """


class RedisRecallLayoutError(RedisRecallError):
    """A tenant's index was written by an earlier version of the store, in a key layout this one refuses.

    Layout 4 (this version) indexes stemmed words, each archived group
    with its neighbours' edge lines as context, and each text with its block
    digests, which every read checks; a layout-1 index holds words
    unstemmed, so its postings cannot be ranked with stemmed queries, a
    layout-2 index has no context, so its groups would rank below this
    layout's, and a layout-3 index has no block digests, so its texts cannot
    be checked: none is mixed with this one. Discovery and indexing of that
    tenant are refused (nothing is written), and so is a read of a source
    without block digests; validations and ``seek_groups`` still work.
    Rebuild the index under a new ``key_prefix`` (the README's "Upgrading
    the key layout" says how). An older version of the store raises it too
    for a tenant an erase of a newer one marked (``P:v`` ``5``): there,
    upgrade that process instead (the README's "Rolling upgrades").
    """


class RedisRecallValueTooLargeError(RedisRecallError):
    """A stored value is larger than the store's read cap (``max_value_bytes``), so it was not read.

    ``seek_groups`` never returns part of an archived group. Raise
    ``max_value_bytes`` if such groups are expected, or rebuild the index.
    """


class RedisRecallTimeoutError(RedisRecallError, OperationCancelledError):
    """A write was cut off (deadline or a broken connection) and settling it found it not (fully) applied.

    After a write loses its reply, the store never sends it again; it
    re-reads the write's token on the server. A write found applied is
    reported as a success (it took effect exactly once). Otherwise this error
    is raised: ``applied`` is ``False`` when the write (or, for a batch, some
    of its chunks) had not taken effect and is now fenced, so a copy still in
    flight can never apply later; it is ``None`` when the server could not be
    reached to settle it by the write's deadline (validate before relying on
    the source; settling goes on in the background for up to
    ``settle_timeout_s``). Indexing again is always safe: it is idempotent.
    """

    def __init__(self, message: str, applied: bool | None, reason: str = "deadline passed") -> None:
        self.applied = applied
        super().__init__(message, reason)
