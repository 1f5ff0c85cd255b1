"""Fixtures: real servers (Redis and Valkey), admin clients and fresh stores, on asyncio.

Server fixtures FAIL when no binary is found; they never skip (see ``redis_servers``).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).parent))

from net_proxy import BlackHoleProxy
from redis_servers import FLAVOURS, ServerNotFound, ServerProcess, new_prefix

from agentium_recall_redis import RedisRecallConfig, RedisRecallStore


@pytest.fixture
def anyio_backend() -> str:
    """redis.asyncio runs on asyncio only; every test here does too."""
    return "asyncio"


def start_server(
    flavour: str, workdir: Path, *, aof: bool = False, extra: tuple[str, ...] = ()
) -> ServerProcess:
    """Start a server or fail the test (never skip) when its binary is missing."""
    try:
        return ServerProcess(flavour, workdir, aof=aof, extra=extra).start()
    except ServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session", params=FLAVOURS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server of each flavour (persistence off), shared by the session."""
    process = start_server(request.param, tmp_path_factory.mktemp(f"{request.param}-fast"))
    yield process
    process.stop()


@pytest.fixture
def aof_server(server: ServerProcess, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the same flavour with AOF ``appendfsync always``, for one test (it may be killed)."""
    process = start_server(server.flavour, tmp_path / "aof", aof=True)
    yield process
    process.stop()


@pytest.fixture
def make_server(server: ServerProcess, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start extra servers of the current flavour with extra config (``extra=("--requirepass", ...)``)."""
    started: list[ServerProcess] = []

    def make(*extra: str, aof: bool = False) -> ServerProcess:
        process = start_server(server.flavour, tmp_path / f"extra{len(started)}", aof=aof, extra=extra)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()


@pytest.fixture
async def admin(server: ServerProcess) -> AsyncIterator[aioredis.Redis]:
    """A plain redis-py client on the shared server, for looking behind the store's back.

    Its reads wait up to 120 s, not redis-py's default 5 s: a test that grows a field to
    64 MiB with a Lua script waits for that script, which took over 5 s on a loaded machine.
    """
    client = aioredis.Redis.from_url(server.url, socket_timeout=120)
    yield client
    await client.aclose()


@pytest.fixture
async def store(server: ServerProcess) -> AsyncIterator[RedisRecallStore]:
    """A fresh store (its own key prefix) on the shared server."""
    recall = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    yield recall
    await recall.aclose()


@pytest.fixture
def proxy(server: ServerProcess) -> Iterator[BlackHoleProxy]:
    """A loopback proxy in front of the shared server that can black-hole the traffic (``net_proxy``)."""
    forwarder = BlackHoleProxy(server.port).start()
    yield forwarder
    forwarder.close()
