"""Opening the store: bad URLs, refused connections, wrong passwords, servers that cannot host it, durability.

Each bad input has a clear, typed outcome and leaks no credential (R11, R12, D4).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, free_port, new_prefix

from agentium_harness import (
    AgentiumError,
    ConfigError,
    InvalidArgumentError,
    OpContext,
    RecallLimits,
    RecallUnavailableError,
    Scope,
    SourceOwner,
    load_runtime,
)
from agentium_recall_redis import (
    RedisRecallAuthError,
    RedisRecallConfig,
    RedisRecallConnectionError,
    RedisRecallError,
    RedisRecallServerError,
    RedisRecallStore,
    RedisRecallTimeoutError,
    redact_url,
)

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-Pa55word"
SCOPE = Scope("acme", "ana", "s1")


def _everything(exc: BaseException) -> str:
    """Message, repr and the whole printed chain: nothing of it may hold a secret."""
    return str(exc) + repr(exc) + "".join(traceback.format_exception(exc))


async def _open(store: RedisRecallStore) -> None:
    session = await store.open(SCOPE, RecallLimits(), OpContext.with_timeout(30))
    await session.close()


# -- configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"http://ana:{SECRET}@127.0.0.1:6379/0",
        f"ftp://{SECRET}@h/",
        "127.0.0.1:6379",
        f"redis://u:{SECRET}@h:99999/0",
    ],
)
def test_bad_urls_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ValueError) as caught:
        RedisRecallConfig(url=url)
    assert SECRET not in _everything(caught.value)
    assert "redis://" in str(caught.value) or "port" in str(caught.value)


def test_a_bad_scheme_in_a_config_file_is_an_error_at_its_path(tmp_path: Path) -> None:
    text = f"""
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[recall]
plugin = "redis"
options = {{ url = "http://ana:{SECRET}@127.0.0.1:6379/0" }}
"""
    (tmp_path / "agentium.toml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_runtime(tmp_path / "agentium.toml")
    [issue] = caught.value.issues
    assert issue.path.startswith("$.recall.options")
    assert "scheme" in issue.message and SECRET not in _everything(caught.value)


def test_config_and_store_reprs_hide_credentials() -> None:
    config = RedisRecallConfig(
        url=f"redis://ana:{SECRET}@127.0.0.1:6379/0?password={SECRET}", password=SECRET
    )
    store = RedisRecallStore(config)
    for shown in (repr(config), repr(store), store.where, redact_url(config.url)):
        assert SECRET not in shown
    assert "***@127.0.0.1:6379/0" in repr(store)


def test_bad_options_are_refused_with_the_typed_error() -> None:
    # Each raised a bare ValueError (the validators' own); a url with a NUL or another control
    # character was taken, and failed only at the first call, as a server that cannot be reached.
    bad: list[dict[str, Any]] = [
        {"url": ""},
        {"url": None},
        {"url": f"http://ana:{SECRET}@127.0.0.1:6379/0"},
        {"url": "redis://[::1"},
        {"url": "unix://"},
        {"url": f"redis://ana:{SECRET}@127.0.0.1\x00x:6379/0"},
        {"url": "redis://127.0.0.1:6379/0\x00"},
        {"url": "unix:///run/redis\n.sock"},
        {"key_prefix": "a{b}"},
        {"username": ""},
        {"password": 5},
        {"stopwords": "french"},
        {"min_relevance": 2},
        {"min_similarity": True},
        {"vector_weight": float("nan")},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidArgumentError) as caught:
            RedisRecallConfig(**kwargs)
        assert SECRET not in _everything(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        f"redis://ana:{SECRET}@127.0.0.1:6379/abc",
        "redis://127.0.0.1:6379/-1",
        "redis://127.0.0.1:6379/1/2",
        "redis://127.0.0.1:6379/0x1",
        "redis://127.0.0.1:6379/\u0663",
        f"redis://127.0.0.1:6379/0?db=abc&password={SECRET}",
        f"unix:///run/redis.sock?db=-1&password={SECRET}",
    ],
)
def test_a_database_that_is_not_a_non_negative_integer_is_refused(url: str) -> None:
    # redis-py used database 0 for the path "/abc" (and database 12 for "/1/2"), so the store
    # wrote to another database than the one meant; "?db=abc" failed only at the first call.
    with pytest.raises(InvalidArgumentError, match="database number") as caught:
        RedisRecallConfig(url=url)
    assert SECRET not in _everything(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379",
        "redis://127.0.0.1:6379/",
        "redis://127.0.0.1:6379/15",
        "redis://127.0.0.1:6379/%31",
        "rediss://127.0.0.1:6379/3?db=2",
        "unix:///run/redis.sock?db=3",
    ],
)
def test_urls_naming_a_database_by_number_or_not_at_all_are_taken(url: str) -> None:
    assert RedisRecallConfig(url=url).url == url


def test_a_bad_database_in_a_config_file_is_an_error_at_the_url_option(tmp_path: Path) -> None:
    (tmp_path / "agentium.toml").write_text(
        """
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[recall]
plugin = "redis"
options = { url = "redis://127.0.0.1:6379/abc" }
"""
    )
    with pytest.raises(ConfigError) as caught:
        load_runtime(tmp_path / "agentium.toml")
    [issue] = caught.value.issues
    assert issue.path == "$.recall.options.url" and "database number" in issue.message


@pytest.mark.parametrize("prefix", ["", "a{b}", "x*", "a?b", "[a-z]", "a b", "a\\b", "-lead", "x" * 65])
def test_key_prefixes_that_could_widen_a_pattern_or_move_slots_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="key_prefix"):
        RedisRecallConfig(key_prefix=prefix)


def test_building_does_no_io_and_a_lent_client_must_be_async() -> None:
    RedisRecallStore(RedisRecallConfig(url=f"redis://127.0.0.1:{free_port()}/0"))  # nothing listens: fine
    with pytest.raises(InvalidArgumentError):
        RedisRecallStore(client=object())  # type: ignore[arg-type]


# -- connecting ---------------------------------------------------------------------------------------


async def test_connection_refused_is_a_clear_connection_error() -> None:
    port = free_port()
    store = RedisRecallStore(RedisRecallConfig(url=f"redis://ana:{SECRET}@127.0.0.1:{port}/0"))
    try:
        with pytest.raises(RedisRecallConnectionError) as caught:
            await _open(store)
        assert f"127.0.0.1:{port}" in str(caught.value) and SECRET not in _everything(caught.value)
        with pytest.raises(RedisRecallConnectionError):  # a failed open is retried, and fails again
            await store.index_document(SourceOwner("acme"), "d", "text", OpContext.with_timeout(30))
    finally:
        await store.aclose()


@pytest.mark.parametrize("where", ["option", "url", "none"])
async def test_a_wrong_password_is_an_auth_error_that_never_echoes_it(
    make_server: Callable[..., ServerProcess], where: str
) -> None:
    protected = make_server("--requirepass", "the-right-one")
    base = f"redis://127.0.0.1:{protected.port}/0"
    config = {
        "option": RedisRecallConfig(url=base, password=SECRET),
        "url": RedisRecallConfig(url=f"redis://default:{SECRET}@127.0.0.1:{protected.port}/0"),
        "none": RedisRecallConfig(url=base),
    }[where]
    store = RedisRecallStore(config)
    try:
        with pytest.raises(RedisRecallAuthError) as caught:
            await _open(store)
        assert "password" in str(caught.value) and SECRET not in _everything(caught.value)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
    finally:
        await store.aclose()
    good = RedisRecallStore(RedisRecallConfig(url=base, password="the-right-one", key_prefix=new_prefix()))
    try:
        await _open(good)
    finally:
        await good.aclose()


async def test_a_missing_command_is_refused_at_open_and_nothing_is_written(
    make_server: Callable[..., ServerProcess],
) -> None:
    crippled = make_server("--rename-command", "ZRANGE", "")
    store = RedisRecallStore(RedisRecallConfig(url=crippled.url))
    try:
        with pytest.raises(RedisRecallServerError, match="ZRANGE") as caught:
            await store.index_document(SourceOwner("acme"), "d", "zebra", OpContext.with_timeout(30))
        assert isinstance(caught.value, RecallUnavailableError)
    finally:
        await store.aclose()
    admin = aioredis.Redis.from_url(crippled.url)
    try:
        assert await admin.dbsize() == 0
    finally:
        await admin.aclose()


async def test_a_server_without_lua_scripting_is_refused_at_open(
    make_server: Callable[..., ServerProcess],
) -> None:
    no_lua = make_server(
        *("--rename-command", "EVAL", ""),
        *("--rename-command", "EVALSHA", ""),
        *("--rename-command", "SCRIPT", ""),
    )
    store = RedisRecallStore(RedisRecallConfig(url=no_lua.url))
    try:
        with pytest.raises(RedisRecallServerError, match="Lua") as caught:
            await _open(store)
        assert "EVAL" in str(caught.value)
    finally:
        await store.aclose()


async def test_a_closed_store_refuses_calls(store: RedisRecallStore) -> None:
    await _open(store)
    await store.aclose()
    await store.aclose()
    with pytest.raises(RedisRecallError, match="closed"):
        await _open(store)


async def _in_flight(outcome: list[object]) -> None:
    """Return once the call started beside this task is waiting for its reply (the server is paused).

    Every other task blocked is what marks it: its command was sent and it awaits the reply. A sleep
    used to stand for that; a stalled machine could let the close come first (the call never in
    flight) or the pause end first (the call answered). The call must not have ended already.
    """
    await anyio.wait_all_tasks_blocked()
    assert outcome == [], f"the call ended before the close, while the server was paused: {outcome}"


async def test_a_read_in_flight_when_the_store_closes_ends_and_leaves_no_connection_open(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # aclose() disconnected the pool under a read waiting for its reply; the link took that for a
    # stale pooled connection and sent the read again on a new connection of the closed client,
    # which answered after the close and then stayed open (a leak). Now the read ends with a typed
    # error and the closed store holds no connection.
    name = f"close-{new_prefix()}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), client_name=name))
    await store.index_document(SourceOwner("cl"), "d", "kiwi text", OpContext.with_timeout(30))
    session = await store.open(Scope("cl", "u", "s"), RecallLimits(), OpContext.with_timeout(30))
    outcome: list[object] = []

    async def discover() -> None:
        try:
            outcome.append(await session.discover("kiwi", 4, OpContext.with_timeout(20)))
        except RedisRecallError as exc:
            outcome.append(exc)

    await admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")  # the read waits for its reply
    async with anyio.create_task_group() as tg:
        tg.start_soon(discover)
        await _in_flight(outcome)
        await store.aclose()
    assert isinstance(outcome[0], RedisRecallError) and "closed" in str(outcome[0])
    await anyio.sleep(1.5)  # past the pause: a read sent again would have been answered by now
    assert [c for c in await admin.client_list() if c.get("name") == name] == []


async def test_a_write_cut_off_by_the_close_is_settled_truthfully_and_leaves_no_connection_open(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # A write whose connection aclose() broke is settled (re-read its token, fence it) on a new
    # connection of the closed client, as it must be; that connection then stayed open for good.
    name = f"close-{new_prefix()}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), client_name=name))
    owner = SourceOwner("cl")
    await store.index_document(owner, "d", "kiwi text", OpContext.with_timeout(30))
    outcome: list[object] = []

    async def write() -> None:
        try:
            outcome.append(await store.index_document(owner, "e", "kiwi more", OpContext.with_timeout(20)))
        except RedisRecallTimeoutError as exc:
            outcome.append(exc)

    await admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")  # the write waits for its reply
    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        await _in_flight(outcome)
        await store.aclose()
    assert isinstance(outcome[0], RedisRecallTimeoutError) and outcome[0].applied is False
    await anyio.sleep(2.0)  # past the pause and the settlement
    assert [c for c in await admin.client_list() if c.get("name") == name] == []
    reader = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=store.config.key_prefix))
    session = await reader.open(Scope("cl", "u", "s"), RecallLimits(), OpContext.with_timeout(30))
    found = await session.discover("kiwi", 5, OpContext.with_timeout(30))
    assert [c.ref.source_id for c in found] == ["doc/cl/~/~/~/~/d"]  # fenced: it never ran
    await reader.aclose()


def test_under_trio_the_store_says_it_needs_asyncio() -> None:
    trio = pytest.importorskip("trio")
    store = RedisRecallStore()

    async def main() -> None:
        await _open(store)

    with pytest.raises(RedisRecallError, match="asyncio only"):
        trio.run(main)


# -- durability ---------------------------------------------------------------------------------------


async def test_open_reports_a_server_without_aof_as_not_durable(
    store: RedisRecallStore, server: ServerProcess
) -> None:
    assert store.server_report is None
    await _open(store)
    report = store.server_report
    assert report is not None and report.flavour == server.flavour
    assert (report.appendonly, report.durable) == ("no", False)
    assert "not durable" in await store.health(OpContext.with_timeout(30))


async def test_open_reports_aof_always_as_durable(aof_server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=aof_server.url))
    try:
        text = await store.health(OpContext.with_timeout(30))
        assert store.server_report is not None and store.server_report.durable is True
        assert "durable (appendonly yes, appendfsync always)" in text and aof_server.url in text
    finally:
        await store.aclose()


async def test_durability_is_unknown_when_config_is_disabled(
    make_server: Callable[..., ServerProcess],
) -> None:
    no_config = make_server("--rename-command", "CONFIG", "")
    store = RedisRecallStore(RedisRecallConfig(url=no_config.url))
    try:
        ref = await store.index_document(SourceOwner("acme"), "d", "zebra", OpContext.with_timeout(30))
        assert ref.source_id.startswith("doc/acme/")
        assert store.server_report is not None and store.server_report.durable is None
        assert "durability unknown" in await store.health(OpContext.with_timeout(30))
    finally:
        await store.aclose()


# -- owned and lent clients -----------------------------------------------------------------------------


async def _connections_named(admin: aioredis.Redis, name: str) -> int:
    listing = await admin.client_list()
    return sum(1 for c in listing if c.get("name") == name)


async def _connections_gone(admin: aioredis.Redis, name: str) -> int:
    """Connections still named ``name``, once the server has seen them close (it does so asynchronously)."""
    # The server offers nothing to wait on, so it is polled: at most 250 times, 20 ms apart.
    for _ in range(250):
        left = await _connections_named(admin, name)
        if not left:
            return 0
        await anyio.sleep(0.02)
    return left


async def test_an_owned_client_is_closed_with_the_store(server: ServerProcess, admin: aioredis.Redis) -> None:
    name = f"owned-{new_prefix()}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), client_name=name))
    assert store.owns_client
    await store.index_document(SourceOwner("acme"), "d", "zebra", OpContext.with_timeout(30))
    assert await _connections_named(admin, name) >= 1
    await store.aclose()
    assert await _connections_gone(admin, name) == 0


async def test_a_lent_client_is_never_closed(server: ServerProcess) -> None:
    client = aioredis.Redis.from_url(server.url, decode_responses=True, protocol=3)
    store = RedisRecallStore(
        RedisRecallConfig(key_prefix=new_prefix(), url="redis://ignored:1/0"), client=client
    )
    try:
        assert not store.owns_client and "lent client" in repr(store)
        ref = await store.index_document(
            SourceOwner("acme"), "d", "the zebra grazes", OpContext.with_timeout(30)
        )
        session = await store.open(SCOPE, RecallLimits(), OpContext.with_timeout(30))
        [found] = await session.discover("zebra", 4, OpContext.with_timeout(30))
        assert found.ref == ref  # RESP3 and decode_responses on the lent client change nothing
        # Reads too: the text and its binary block digests arrive as bytes, checked.
        [excerpt] = await session.read([ref], 1000, OpContext.with_timeout(30))
        assert excerpt.text == "the zebra grazes"
        await session.close()
        await store.aclose()
        assert await client.ping() is True  # still open
    finally:
        await client.aclose()


def test_every_error_is_an_agentium_error() -> None:
    for cls in (RedisRecallAuthError, RedisRecallConnectionError, RedisRecallServerError, RedisRecallError):
        assert issubclass(cls, AgentiumError)
