"""What the Redis recall store needs to know about its server, and how its errors are told.

- The client: :func:`make_client` builds the store's own ``redis.asyncio``
  client (never retrying), :func:`describe_client` says where a lent one
  points, :func:`collect_secrets` gathers what must never be shown.
- The open: :data:`OPEN_COMMANDS` is the pipeline of the store's first call
  and :func:`check_server` turns its replies into a
  :class:`~agentium_recall_redis.link.ServerReport` or a typed error.
- Errors: :class:`ServerErrors` maps redis-py and socket errors, and the
  server's error replies, to the store's typed errors, with credentials
  scrubbed from every message.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

import attrs

from agentium_harness import EmbeddingModelMismatchError, InvalidArgumentError

from .config import RedisRecallConfig
from .errors import (
    RedisRecallAuthError,
    RedisRecallConnectionError,
    RedisRecallError,
    RedisRecallLayoutError,
    RedisRecallServerError,
)
from .link import (
    MIN_VERSION,
    Command,
    Reply,
    ServerReport,
    as_text,
    config_value,
    parse_info,
    version_tuple,
)
from .scripts import REQUIRED_COMMANDS, SCRIPTS

if TYPE_CHECKING:
    # redis is imported where a client is made or its errors are told apart, not when the plugin
    # loads: listing plugins (``agentium plugins``) must not pay for it.
    from redis.asyncio import Redis
    from redis.exceptions import ResponseError

__all__ = [
    "OPEN_COMMANDS",
    "Arg",
    "ServerErrors",
    "check_server",
    "collect_secrets",
    "config_or_unknown",
    "describe_client",
    "make_client",
    "recheck",
    "require_asyncio",
]

#: One argument of a command or a script call.
Arg = str | bytes | int | float

#: The store's first round trip (its *open*): version, commands, durability, and every script loaded.
OPEN_COMMANDS: tuple[Command, ...] = (
    ("INFO", "server"),
    ("COMMAND", "INFO", *REQUIRED_COMMANDS),
    ("CONFIG", "GET", "appendonly"),
    ("CONFIG", "GET", "appendfsync"),
    *(("SCRIPT", "LOAD", s.source) for s in SCRIPTS),
)


def require_asyncio(operation: str) -> None:
    """Refuse ``operation`` unless it runs under asyncio (the store uses ``redis.asyncio``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RedisRecallError(
            f"{operation}: the Redis recall store runs on asyncio only (it uses redis.asyncio); run the host "
            "under asyncio, or use another recall store under trio"
        ) from None


def describe_client(client: Redis) -> str:
    """Where a lent client points, from its pool's settings (never its credentials)."""
    kwargs = getattr(client.connection_pool, "connection_kwargs", {}) or {}
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)} (lent client)"


def collect_secrets(config: RedisRecallConfig, lent: Redis | None) -> tuple[str, ...]:
    """The credentials of ``config`` (options and url) and of a lent client: never shown in a message."""
    found = {config.password, config.username}
    try:
        parts = urlsplit(config.url)
        found.update({parts.password, parts.username})
    except ValueError:
        pass
    if lent is not None:
        kwargs = getattr(lent.connection_pool, "connection_kwargs", {}) or {}
        found.add(kwargs.get("password"))
    return tuple(s for s in found if isinstance(s, str) and len(s) >= 3)


def config_or_unknown(reply: Reply, name: str) -> str:
    """The value of a ``CONFIG GET name`` reply, or ``"unknown"`` if refused (``CONFIG`` may be disabled)."""
    from redis.exceptions import ResponseError

    if isinstance(reply, ResponseError):
        return "unknown"
    value = config_value(reply, name)
    return value if value else "unknown"


@attrs.frozen
class ServerErrors:
    """Turns redis-py, socket and server errors into the store's typed errors (credentials never shown).

    ``where`` is the server's location without credentials; ``secrets`` are
    replaced by ``***`` in every message that quotes the client or server.
    """

    where: str
    secrets: tuple[str, ...]
    socket_timeout_s: float
    key_prefix: str

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def fail(self, exc: BaseException, operation: str) -> NoReturn:
        """Raise the store's typed error for a redis-py or socket error (credentials never shown)."""
        from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        where = self.where
        if isinstance(exc, AuthenticationError | NoPermissionError):
            raise RedisRecallAuthError(
                f"{operation}: the server at {where} refused the credentials or this user's permissions "
                "(wrong username or password, a disabled ACL user, or an ACL that forbids a command the "
                "store needs); check the username and password options"
            ) from None
        if isinstance(exc, RedisTimeoutError):
            raise RedisRecallConnectionError(
                f"{operation}: the server at {where} did not answer within socket_timeout_s "
                f"({self.socket_timeout_s} s); nothing was returned"
            ) from None
        if isinstance(exc, RedisConnectionError | OSError):
            raise RedisRecallConnectionError(
                f"{operation}: cannot reach the server at {where} ({self.scrub(str(exc))}); check that it "
                "runs and that the url option points at it"
            ) from None
        if isinstance(exc, ResponseError):
            self.refused(exc, operation)
        raise RedisRecallError(f"{operation}: {type(exc).__name__}: {self.scrub(str(exc))}") from None

    def refused(self, exc: ResponseError, operation: str) -> NoReturn:
        """Raise the store's typed error for an error reply of the server."""
        from redis.exceptions import NoPermissionError

        if isinstance(exc, NoPermissionError):
            self.fail(exc, operation)
        message = self.scrub(str(exc))
        upper = message.upper()
        if "AGENTIUM_LAYOUT" in message:
            raise RedisRecallLayoutError(
                f"{operation}: this tenant's index under key_prefix {self.key_prefix!r} was written by an "
                "earlier version of agentium-recall-redis (key layout 1: words not stemmed; layout 2: "
                "groups without neighbouring context; layout 3: texts without block digests, which reads "
                "cannot check), which this version (layout 4) cannot rank or "
                "extend; nothing was written. Rebuild it under a new "
                "key_prefix and `agentium recall rebuild` (the plugin README, 'Upgrading the key layout')"
            )
        if "AGENTIUM_ERASING" in message:
            raise RedisRecallError(
                f"{operation}: an erasure covering this source's owner is running, so the source could "
                "land after the erasure read what to erase; nothing was written. Index it again once the "
                "erasure has completed"
            )
        if "AGENTIUM_MODEL " in message:
            have, _, wanted = (p.strip() for p in message.split("AGENTIUM_MODEL ", 1)[1].partition(" | "))
            raise EmbeddingModelMismatchError(
                f"{operation}: this tenant's index under key_prefix {self.key_prefix!r} holds vectors of "
                f"{have}, not of {wanted}; vectors of two models are never mixed, and nothing was "
                f"written. Configure the embedder the index was built with ({have}), or rebuild "
                "the index under a new key_prefix with `agentium recall rebuild`"
            )
        if "UNKNOWN COMMAND" in upper:
            raise RedisRecallServerError(
                f"{operation}: the server at {self.where} does not know a command the store needs ({message})"
            )
        if upper.startswith("OOM") or "OOM COMMAND NOT ALLOWED" in upper:
            raise RedisRecallError(
                f"{operation}: the server at {self.where} is out of memory (maxmemory); nothing was written"
            )
        if upper.startswith("READONLY") or "READONLY" in upper:
            raise RedisRecallError(
                f"{operation}: the server at {self.where} is a read-only replica; point url at the primary"
            )
        if "WRONGTYPE" in upper:
            raise RedisRecallError(
                f"{operation}: a key under key_prefix {self.key_prefix!r} holds another type of value; "
                "nothing was written (every write checks its keys before its first write). Something else "
                "writes there: use a key_prefix of the store's own"
            )
        raise RedisRecallError(f"{operation}: the server at {self.where} refused: {message}")


def make_client(config: RedisRecallConfig, errors: ServerErrors) -> Redis:
    """The store's own ``redis.asyncio`` client for ``config.url``; a bad url is ``InvalidArgumentError``."""
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    c = config
    kwargs: dict[str, Any] = {
        "socket_connect_timeout": c.connect_timeout_s,
        "socket_timeout": c.socket_timeout_s,
        "max_connections": c.max_connections,
        # The store never lets the client retry: a write is settled, never re-sent.
        "retry": Retry(NoBackoff(), 0),
        "client_name": c.client_name,
    }
    if c.username is not None:
        kwargs["username"] = c.username
    if c.password is not None:
        kwargs["password"] = c.password
    if c.ssl_ca_certs is not None and c.url.startswith("rediss:"):
        kwargs["ssl_ca_certs"] = c.ssl_ca_certs
    try:
        return Redis.from_url(c.url, **kwargs)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(
            f"redis recall store: cannot use the url {errors.where}: {errors.scrub(str(exc))}"
        ) from None


def _identity(info: dict[str, str]) -> tuple[str, str | None]:
    """The server's flavour (``redis`` or ``valkey``) and its own version, from ``INFO server``."""
    flavour = "valkey" if info.get("server_name") == "valkey" or "valkey_version" in info else "redis"
    return flavour, info.get("valkey_version") if flavour == "valkey" else info.get("redis_version")


def recheck(report: ServerReport, replies: list[Reply]) -> ServerReport:
    """``report`` brought up to date by the replies to :data:`~agentium_recall_redis.link.CHECK_COMMANDS`.

    A different ``run_id`` counts as a restart. A reply the server refused
    leaves what it would have said as it was.
    """
    from redis.exceptions import ResponseError

    info_reply, appendonly, appendfsync = replies
    info = {} if isinstance(info_reply, ResponseError) else parse_info(as_text(info_reply))
    flavour, version = _identity(info) if info else (report.flavour, report.version)
    run_id = info.get("run_id", "") or report.run_id
    restarted = bool(report.run_id) and run_id != report.run_id
    return attrs.evolve(
        report,
        flavour=flavour,
        version=version or report.version,
        appendonly=config_or_unknown(appendonly, "appendonly"),
        appendfsync=config_or_unknown(appendfsync, "appendfsync"),
        run_id=run_id,
        restarts=report.restarts + restarted,
    )


def check_server(replies: list[Reply], errors: ServerErrors) -> ServerReport:
    """The server's report from the replies to :data:`OPEN_COMMANDS`; refuse a server the store cannot use."""
    from redis.exceptions import ResponseError

    where = errors.where
    info_reply, commands_reply, appendonly, appendfsync, *loaded = replies
    if isinstance(info_reply, ResponseError):
        errors.refused(info_reply, "recall open")
    info = parse_info(as_text(info_reply))
    flavour, version = _identity(info)
    compat = info.get("redis_version", "0")
    if version_tuple(compat) < MIN_VERSION:
        raise RedisRecallServerError(
            f"redis recall store: the server at {where} is {flavour} {version or compat}; "
            "the store needs Redis >= 6.2 or Valkey"
        )
    if isinstance(commands_reply, list):  # COMMAND itself may be disabled: then scripts tell below
        missing = [name for name, entry in zip(REQUIRED_COMMANDS, commands_reply, strict=False) if not entry]
        if missing:
            raise RedisRecallServerError(
                f"redis recall store: the server at {where} lacks the command(s) "
                f"{', '.join(m.upper() for m in missing)} (missing or disabled with rename-command); the "
                "store needs them all, with Lua scripting (EVAL/EVALSHA)"
            )
    for script, reply in zip(SCRIPTS, loaded, strict=True):
        if isinstance(reply, ResponseError) or as_text(reply) != script.sha:
            why = errors.scrub(str(reply)) if isinstance(reply, ResponseError) else "an unexpected digest"
            raise RedisRecallServerError(
                f"redis recall store: the server at {where} cannot run the store's Lua scripts "
                f"(SCRIPT LOAD of {script.name!r}: {why}); the store needs Lua scripting (EVAL/EVALSHA)"
            )
    return ServerReport(
        flavour,
        version or compat,
        config_or_unknown(appendonly, "appendonly"),
        config_or_unknown(appendfsync, "appendfsync"),
        info.get("run_id", ""),
    )
