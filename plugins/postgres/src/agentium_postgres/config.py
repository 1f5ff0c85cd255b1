"""The options of every PostgreSQL adapter (``[archive.options]``, ``[session_store.options]``, ...).

:class:`PostgresConfig` is a frozen attrs class, structured from a config file
by the core's strict loader: unknown keys and wrong types are errors at
``$.archive.options.<key>``. Its validators never echo a credential, and its
``repr`` hides the password (in ``password`` or inside ``dsn``).
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import re
from typing import Any, Final

import attrs

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import bounded_count, bounded_duration

from .host_list import may_reach_several_servers

__all__ = ["PostgresConfig", "redact_dsn", "server_label"]

# An unquoted PostgreSQL identifier in lower case: safe to splice into DDL and
# statements without quoting trouble (it is still always double-quoted there).
_IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")


#: Connection options that never change which server, database and role a connection reaches.
_NOT_WHERE: Final = frozenset(
    {
        "password",
        "sslpassword",
        "passfile",
        "application_name",
        "fallback_application_name",
        "connect_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)

#: Numbers the identities of options that may reach several servers: no two are ever equal.
_UNSHARED: Final = itertools.count()


@functools.cache
def _secret_options() -> frozenset[str]:
    """The options libpq hides (``*``: a password field; ``D``: a debug option, the SCRAM keys among them).

    libpq 18 added an OAuth client secret and the SCRAM keys, which authenticate as the password
    does: a fixed list of secrets went out of date, and identity() kept them. ``replication``, also
    ``D``, still counts (a replication connection is not an ordinary session of the database).
    """
    import psycopg.pq

    try:
        hidden = {
            o.keyword.decode()
            for o in psycopg.pq.Conninfo.get_defaults()
            if o.dispchar == b"*" or (o.dispchar == b"D" and o.keyword != b"replication")
        }
    except psycopg.Error:  # libpq could not list its options (out of memory): the known ones
        hidden = set()
    return frozenset(hidden | {"oauth_client_secret", "scram_client_key", "scram_server_key"})


def _one_address_spelling(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with ``host=<IP addresses>`` or ``hostaddr=`` (either alone) as canonical ``hostaddr=``.

    libpq connects to a ``host`` that is a numeric IP address without a name lookup, exactly as to
    that ``hostaddr``; so ``host=127.0.0.1`` and ``hostaddr=127.0.0.1`` (or ``::1`` and
    ``0:0:0:0:0:0:0:1``) reach one server. Only when nothing else can supply the address the
    other spelling leaves out: no ``service`` (a service file may name a ``hostaddr``), no
    ``PGSERVICE`` or ``PGHOSTADDR`` in the environment (libpq would take the address from there
    for ``host=`` alone), not both options given, every comma-separated entry an address Python's
    strict parser reads (``127.1`` is not taken). Anything else is kept as written.
    """
    host, hostaddr = info.get("host"), info.get("hostaddr")
    if (host is None) == (hostaddr is None) or info.get("service") is not None:
        return info
    if os.environ.get("PGSERVICE") or os.environ.get("PGHOSTADDR"):
        return info
    try:
        given = str(hostaddr if hostaddr is not None else host)
        canonical = ",".join(str(ipaddress.ip_address(a)) for a in given.split(","))
    except ValueError:  # a host name, a socket folder, an empty entry: as written
        return info
    return {**{k: v for k, v in info.items() if k not in ("host", "hostaddr")}, "hostaddr": canonical}


def _conninfo(dsn: str) -> dict[str, Any]:
    """The parsed connection options; ``InvalidArgumentError`` (never showing the text) if unparsable."""
    # A copy: the cached parse is shared by every caller.
    return dict(_parsed(dsn))


@functools.lru_cache(maxsize=16)
def _parsed(dsn: str) -> tuple[tuple[str, Any], ...]:
    """The options ``dsn`` sets, as libpq parses them (cached: see below).

    Cached because the engine compares identities at every evicting commit and the parse is most
    of that cost (about 30 of 40 us). True to cache: libpq's parse reads the text alone (no
    environment, no service file; those are read afresh by each caller). An unparsable ``dsn``
    raises each time (lru_cache keeps no exception). Bounded: a process has a few configs.
    """
    # Imported here, not at module level: listing the plugin (which names this class) must not load
    # the client library.
    import psycopg.conninfo

    try:
        return tuple(psycopg.conninfo.conninfo_to_dict(dsn).items())
    except psycopg.ProgrammingError:
        # libpq's message may quote the malformed text, password included: say only where to look.
        raise InvalidArgumentError(
            "dsn is not a valid libpq connection string or postgresql:// URL (the text is not shown)"
        ) from None


def redact_dsn(dsn: str) -> str:
    """``dsn`` as ``postgresql://user@host:port/dbname``: never the password, never raises."""
    try:
        info = _conninfo(dsn)
    except ValueError:
        return "<unparsable dsn>"
    return server_label(info)


def server_label(info: dict[str, Any]) -> str:
    """A short name of the server for messages: ``user@host:port/dbname`` (libpq defaults shown as such)."""
    host = str(info.get("host") or info.get("hostaddr") or "local socket")
    port = str(info.get("port") or "5432")
    dbname = str(info.get("dbname") or info.get("user") or "default database")
    user = str(info.get("user") or "default user")
    return f"postgresql://{user}@{host}:{port}/{dbname}"


def _dsn(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError("dsn must be a non-empty libpq connection string or postgresql:// URL")
    if "\x00" in value or not _encodable(value):
        raise InvalidArgumentError("dsn must not contain NUL or a lone surrogate (the text is not shown)")
    _conninfo(value)


def _encodable(value: str) -> bool:
    """True if ``value`` is valid Unicode text (no lone surrogate): what libpq can be sent."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _identifier(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value) or value.startswith("pg_"):
        raise InvalidArgumentError(
            f"{attribute.name} must be a lower-case PostgreSQL identifier (a-z, 0-9, '_', starting with a "
            f"letter or '_', at most 63 characters, not starting with 'pg_'), got {value!r}"
        )


def _password(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # The value is a secret: say what is wrong without showing it.
    if value is not None and (
        not isinstance(value, str) or not value or "\x00" in value or "\n" in value or not _encodable(value)
    ):
        raise InvalidArgumentError(
            "password must be a non-empty single-line string without NUL or a lone surrogate, or left out"
        )


def _similarity(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1.0 <= float(value) <= 1.0:
        raise InvalidArgumentError(f"{attribute.name} must be a number from -1 to 1, got {value!r}")


def _share(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise InvalidArgumentError(f"{attribute.name} must be a number from 0 to 1, got {value!r}")


def _secret_repr(value: object) -> str:
    return "None" if value is None else "'***'"


def _flag(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # Taken for its truth, 0 or "" would let a role that bypasses row-level security run.
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{attribute.name} must be true or false, got {type(value).__name__}")


@attrs.frozen(slots=True)
class PostgresConfig:
    """Options of the PostgreSQL archive, session store, recall store and memory store (one class for all).

    - ``dsn`` (required): a libpq connection string (``host=... dbname=...``)
      or a ``postgresql://`` URL. Prefer ``dsn = "${AGENTIUM_PG_DSN}"`` and
      keep the password out of the file (``password``, ``PGPASSWORD`` or
      ``~/.pgpass``). It is never shown in a message or ``repr``.
    - ``password``: the password, when it is not in ``dsn`` or libpq's
      environment; never shown.
    - ``schema``: the PostgreSQL schema holding the tables (default
      ``agentium``); ``agentium postgres migrate`` creates it.
    - ``min_pool_size`` / ``max_pool_size``: connections of the pool an
      adapter owns (each adapter built from config owns one; lend one pool to
      all four to share it).
    - ``connect_timeout_s``: bound on opening one connection.
    - ``statement_timeout_s``: ceiling of every statement
      (``SET LOCAL statement_timeout``); a call's own deadline narrows it.
    - ``cancel_timeout_s``: how long a cancel request the client sends (a
      margin before a call's deadline) waits for the server to take it; one
      not confirmed by then may still arrive, so its connection is closed
      (default 1 s).
    - ``close_timeout_s``: bound on ``aclose()`` as a whole (default 4 s,
      within the runtime's own ``close_timeout_s`` of 5 s); what is still
      unfinished then is given up and named in the error ``aclose()`` raises.
    - ``max_row_bytes``: the largest group, snapshot or document written or
      read (default 16 MiB); larger ones are refused before any statement.
    - ``max_ranked_matches``: how many of the newest matches one recall
      discovery ranks at most (see the README's recall section).
    - ``require_row_security``: refuse to run when the connected role
      bypasses row-level security (a superuser, a role with ``BYPASSRLS``,
      or one holding the rights of ``recall_sources``' owner, whom its
      policy does not bind, or where a tenant table's policy is off):
      with it, the database's own tenant isolation is guaranteed, not just
      configured. It must be exactly ``True`` or ``False``.

    Hybrid recall (an ``[embedder]`` beside the recall store), with the
    built-in SQLite store's defaults, tuned on LoCoMo:

    - ``max_vector_scan``: how many of the scope's newest sources with a
      vector are scored, besides the lexical pool: the bound on a hybrid
      discovery's vector work.
    - ``hybrid_depth``: how many of each ranking (lexical, vector) enter the
      fusion; the lexical pool is ``4 * hybrid_depth`` sources.
    - ``min_similarity`` (-1 to 1): the cosine similarity a source's vector
      must reach for the vector ranking to return it.
    - ``vector_weight`` (0 to 1): what the vector ranking counts in
      reciprocal rank fusion against the lexical ranking's 1.
    - ``fusion_k``: reciprocal rank fusion's ``k``.
    """

    dsn: str = attrs.field(validator=_dsn, repr=lambda v: repr(redact_dsn(v)))
    password: str | None = attrs.field(default=None, validator=_password, repr=_secret_repr)
    schema: str = attrs.field(default="agentium", validator=_identifier)
    min_pool_size: int = attrs.field(default=1, validator=bounded_count(minimum=0, ceiling=64))
    max_pool_size: int = attrs.field(default=8, validator=bounded_count(ceiling=256))
    connect_timeout_s: float = attrs.field(default=5.0, validator=bounded_duration())
    statement_timeout_s: float = attrs.field(default=30.0, validator=bounded_duration())
    cancel_timeout_s: float = attrs.field(default=1.0, validator=bounded_duration(ceiling=60.0))
    close_timeout_s: float = attrs.field(default=4.0, validator=bounded_duration(ceiling=600.0))
    max_row_bytes: int = attrs.field(
        default=16 * 1024 * 1024, validator=bounded_count(minimum=1024, ceiling=1024**3)
    )
    max_ranked_matches: int = attrs.field(default=1000, validator=bounded_count(ceiling=1_000_000))
    require_row_security: bool = attrs.field(default=False, validator=_flag)
    max_vector_scan: int = attrs.field(default=500, validator=bounded_count(ceiling=100_000))
    hybrid_depth: int = attrs.field(default=50, validator=bounded_count(ceiling=10_000))
    min_similarity: float = attrs.field(default=0.3, validator=_similarity)
    vector_weight: float = attrs.field(default=0.5, validator=_share)
    fusion_k: int = attrs.field(default=20, validator=bounded_count(minimum=0, ceiling=10_000))

    def __attrs_post_init__(self) -> None:
        """The pool's bounds must be in order."""
        if self.min_pool_size > self.max_pool_size:
            raise InvalidArgumentError("min_pool_size must not exceed max_pool_size")

    def conninfo(self) -> str:
        """The connection string handed to psycopg (``password`` added when given)."""
        if self.password is None:
            return self.dsn
        import psycopg.conninfo

        return psycopg.conninfo.make_conninfo(self.dsn, password=self.password)

    def server(self) -> str:
        """``postgresql://user@host:port/dbname`` of the server, for messages (no password)."""
        return redact_dsn(self.dsn)

    def identity(self) -> tuple[str, ...]:
        """What names the database and schema: two adapters with equal identities share one database.

        Every connection option but the secrets (the password, and every option libpq hides) and
        those that cannot change where a connection lands (:data:`_NOT_WHERE`), as ``key=value``
        in key order, then the schema. Taking only host, port, database and user, ``service=a``
        and ``service=b`` (a ``pg_service.conf`` naming two servers), or two ``hostaddr``, were one
        database: the session store then wrote the archive's groups, in its joint commit, into its
        own database, where the archive never read them. Two strings naming one database in
        different words are two identities: the adapters then commit separately, which is slower,
        never wrong. One other spelling is recognised: an IP address given as ``host=`` or as
        ``hostaddr=`` (see :func:`_one_address_spelling`).

        Options whose connections may land on different servers (several hosts with
        ``load_balance_hosts=random``, hosts and ports that do not pair up, a service not readable
        here: see :func:`~agentium_postgres.host_list.may_reach_several_servers`) get an identity
        equal to no other, not even the next one of this config: two adapters given them never
        share a transaction. A several-host list tried in order is one identity only with the
        same hosts, order, ports and ``target_session_attrs``, as every option counts.
        """
        info = _conninfo(self.dsn)
        named = _named(_one_address_spelling(info), self.schema)
        # The options as written: respelt, host=<address> would read as hostaddr alone, and PGHOST
        # (which libpq ignores when the string names a host) would wrongly join in.
        if may_reach_several_servers(info):
            return (*named, f"unshared={next(_UNSHARED)}")
        return named


def _named(info: dict[str, Any], schema: str) -> tuple[str, ...]:
    """The options that choose the server, database and role, as sorted ``key=value``, then the schema."""
    hidden = _NOT_WHERE | _secret_options()
    where = sorted(f"{k}={v}" for k, v in info.items() if k not in hidden and v is not None)
    return (*where, f"schema={schema}")


def migration_target(config: PostgresConfig) -> tuple[str, ...]:
    """What ``agentium postgres migrate`` deduplicates targets by: the options as written.

    Not :meth:`PostgresConfig.identity`, which is unique for options that may reach several
    servers: one such config used by two adapters is still migrated once.
    """
    return _named(_one_address_spelling(_conninfo(config.dsn)), config.schema)
