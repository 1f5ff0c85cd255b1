"""The options of the Redis recall store (``[recall.options]``) and credential-free URL rendering.

:class:`RedisRecallConfig` is a frozen attrs class, structured from a config
file by the core's strict loader: unknown keys and wrong types are errors at
``$.recall.options.<key>``; built in Python, a bad option raises
``InvalidArgumentError`` (a ``ValueError`` and a ``TypeError``). Its
validators never echo the URL or the password in a message, and its
``repr`` shows the URL through :func:`redact_url`.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import PATH_OPTION, bounded_count, bounded_duration, redact_url

__all__ = [
    "DEFAULT_URL",
    "MAX_TERMS_PER_CALL_CEILING",
    "MAX_TERMS_PER_SOURCE_CEILING",
    "SCHEMES",
    "STOPWORDS",
    "RedisRecallConfig",
    "redact_url",
]

#: Where the store connects when no URL is given: a local server, database 0.
DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"

#: URL schemes redis-py connects with: plain TCP, TLS, a Unix socket.
SCHEMES: Final = ("redis", "rediss", "unix")

# A key prefix is plain ASCII without Redis hash-tag braces (the tenant's tag
# must be the first "{...}" of every key) and without glob characters, so no
# prefix can widen a pattern or move keys to another cluster slot.
_PREFIX: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


def _url(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError("url must be a non-empty string such as redis://127.0.0.1:6379/0")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        # No URL holds one; a NUL in the host or the socket path failed only at the first call,
        # reported as a server that cannot be reached. Not shown: the URL may hold a password.
        raise InvalidArgumentError("url must not contain a NUL or another control character")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # evaluated for its ValueError on a bad port
    except ValueError:
        # The URL may hold a password: only say what is wrong, never show it.
        raise InvalidArgumentError("url is not a valid URL (check its host and port)") from None
    if parts.scheme not in SCHEMES:
        shown = parts.scheme if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,15}", parts.scheme) else "?"
        raise InvalidArgumentError(
            f"url scheme {shown!r} is not supported; use redis://host:port/db, rediss:// (TLS) or unix://path"
        )
    if parts.scheme == "unix" and not parts.path:
        raise InvalidArgumentError(
            "a unix:// url needs the socket's path, for example unix:///run/redis.sock"
        )
    _database(parts.scheme, parts.path, parts.query)


# A database number: what redis-py reads from a URL's path or its db= query parameter.
_DB: Final = re.compile(r"[0-9]{1,9}")


def _database(scheme: str, path: str, query: str) -> None:
    """Refuse a database that is not a non-negative integer (neither the path nor ``?db=`` is shown)."""
    # redis-py silently used database 0 for a path such as "/abc" (and read "/1/2" as 12), so a
    # typo wrote to another database than the one meant. Its "?db=abc" failed only at first use.
    unquoted = unquote(path)
    if scheme != "unix" and unquoted not in ("", "/") and not _DB.fullmatch(unquoted[1:]):
        raise InvalidArgumentError(
            "url path must be a database number (a non-negative integer), as in redis://127.0.0.1:6379/0"
        )
    if any(not _DB.fullmatch(value) for value in parse_qs(query).get("db", [])):
        raise InvalidArgumentError(
            "url parameter db must be a database number (a non-negative integer), as in ?db=0"
        )


def _prefix(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _PREFIX.fullmatch(value):
        raise InvalidArgumentError(
            "key_prefix must be 1-64 characters of letters, digits, '_', '.', ':' and '-', starting with a "
            "letter or digit (no braces or glob characters)"
        )


def _optional_text(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArgumentError(f"{attribute.name} must be a non-empty string or left out")


#: The core's one count rule (plugin_api.bounded_count): an integer from 1 to MAX_COUNT.
_positive_int = bounded_count()


#: The core's one duration rule: finite seconds above 0, at most MAX_DURATION_S (3600).
_seconds = bounded_duration()

#: Ceilings of the per-call and per-source term limits (see :class:`RedisRecallConfig`).
MAX_TERMS_PER_CALL_CEILING: Final = 65_536
MAX_TERMS_PER_SOURCE_CEILING: Final = 10_000_000
_terms_per_call = bounded_count(ceiling=MAX_TERMS_PER_CALL_CEILING)
_terms_per_source = bounded_count(ceiling=MAX_TERMS_PER_SOURCE_CEILING)


#: Stop-word list names (``stopwords``): the same as the SQLite store's.
STOPWORDS: Final = ("english", "none")


def _stopwords(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in STOPWORDS:
        raise InvalidArgumentError(f"stopwords must be one of {', '.join(STOPWORDS)}, got {value!r}")


def _share(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise InvalidArgumentError(f"{attribute.name} must be a number from 0 to 1, got {value!r}")


def _similarity(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1.0 <= float(value) <= 1.0:
        raise InvalidArgumentError(f"{attribute.name} must be a number from -1 to 1, got {value!r}")


def _secret_repr(value: object) -> str:
    return "None" if value is None else "'***'"


@attrs.frozen(slots=True)
class RedisRecallConfig:
    """Options of the Redis recall store.

    - ``url``: ``redis://[user[:password]@]host[:port][/db]``, ``rediss://``
      (TLS) or ``unix:///path/to.sock``; ``db`` (the path, or ``?db=``) is a
      non-negative integer. Ignored when a host lends the store its own client.
    - ``username`` / ``password``: credentials; they override those of the
      URL. Prefer ``password = "${REDIS_PASSWORD}"`` to writing it in the file.
      Neither is ever shown in a message or ``repr``.
    - ``key_prefix``: the first part of every key (default ``agentium:recall``);
      one server can hold several independent stores under different prefixes.
    - ``connect_timeout_s`` / ``socket_timeout_s``: bounds on connecting and
      on waiting for one reply (an operation's deadline can only shorten them).
    - ``max_connections``: the owned client's pool size.
    - ``max_ranked_matches``: how many postings one discovery ranks at most,
      shared between the query's terms (each term's newest visible matches).
    - ``max_read_bytes``: how much of one source's text a read uses; it
      fetches that much rounded up to whole 4 KiB blocks (``GETRANGE``) and
      checks each block against its digest. A longer text is excerpted from
      its first ``max_read_bytes`` and the excerpt says what it left out.
    - ``max_value_bytes``: the largest text or archived group accepted for
      indexing, and the most ``seek_groups`` reads of one stored group.
    - ``max_terms_per_source``: the most distinct words one document or
      archived group may have (at most 10,000,000); a larger one is refused
      before anything is written. It bounds the work of writing one source.
    - ``max_terms_per_call``: the most postings one script call adds (and
      the most it removes), at most 65,536. It bounds how long one call
      holds the server, which runs nothing else meanwhile; a source with
      more distinct words is written over several calls and published by
      one, atomically for readers.
    - ``stopwords``: the words dropped from queries, ``"english"`` (the
      core's list) or ``"none"``.
    - ``min_relevance``: the relevance floor, from 0 to 1: the share of the
      query's weight (the sum of its terms' idf) a source must match to be
      returned at all; applied in the ranking script, before the limit. 0
      returns every source that matches any term.
    - ``min_similarity`` (hybrid recall): the cosine similarity, from -1 to
      1, a source's vector must reach for the vector ranking to return it.
    - ``max_vector_scan`` (hybrid recall): how many of the scope's newest
      sources with a vector are scored, besides the lexical pool; the bound
      on a hybrid discovery's vector work (at most 100,000).
    - ``hybrid_depth`` (hybrid recall): how many of each ranking (lexical,
      vector) enter reciprocal rank fusion; the lexical pool is its best
      ``4 * hybrid_depth`` sources.
    - ``vector_weight`` (hybrid recall, 0 to 1): what the vector ranking
      counts in the fusion against the lexical ranking's 1.
    - ``fusion_k`` (hybrid recall): reciprocal rank fusion's ``k``.
    - ``settle_timeout_s``: how long settling a cut-off write may take; a
      write with a deadline settles by its deadline, and what is left then
      (or after a cancellation) goes on in the background for this long.
    - ``ssl_ca_certs``: a CA bundle for ``rediss://`` (a path option).
    - ``client_name``: the name the owned client's connections show in
      ``CLIENT LIST``.
    """

    url: str = attrs.field(default=DEFAULT_URL, validator=_url, repr=redact_url)
    key_prefix: str = attrs.field(default="agentium:recall", validator=_prefix)
    username: str | None = attrs.field(default=None, validator=_optional_text)
    password: str | None = attrs.field(default=None, validator=_optional_text, repr=_secret_repr)
    connect_timeout_s: float = attrs.field(default=2.0, validator=_seconds)
    socket_timeout_s: float = attrs.field(default=5.0, validator=_seconds)
    max_connections: int = attrs.field(default=64, validator=_positive_int)
    max_ranked_matches: int = attrs.field(default=1000, validator=_positive_int)
    max_read_bytes: int = attrs.field(default=65_536, validator=_positive_int)
    max_value_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_positive_int)
    max_terms_per_source: int = attrs.field(default=100_000, validator=_terms_per_source)
    max_terms_per_call: int = attrs.field(default=4_096, validator=_terms_per_call)
    settle_timeout_s: float = attrs.field(default=2.0, validator=_seconds)
    stopwords: str = attrs.field(default="english", validator=_stopwords)
    min_relevance: float = attrs.field(default=0.3, validator=_share)
    min_similarity: float = attrs.field(default=0.3, validator=_similarity)
    max_vector_scan: int = attrs.field(default=500, validator=bounded_count(ceiling=100_000))
    hybrid_depth: int = attrs.field(default=50, validator=bounded_count(ceiling=10_000))
    vector_weight: float = attrs.field(default=0.5, validator=_share)
    fusion_k: int = attrs.field(default=20, validator=bounded_count(minimum=0, ceiling=10_000))
    ssl_ca_certs: str | None = attrs.field(
        default=None, validator=_optional_text, metadata={PATH_OPTION: True}
    )
    client_name: str = attrs.field(default="agentium-recall", validator=_prefix)
