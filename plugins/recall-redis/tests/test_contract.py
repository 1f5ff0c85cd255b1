"""The core's RecallStoreContract, unchanged, on a real Redis and a real Valkey server (R9-R13, R17, R24)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import redis
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import SessionKey, SourceRef, group_source_id, source_owner
from agentium_harness.testing import RawStorage, RecallStoreContract
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix


def dump_value(client: redis.Redis, key: bytes) -> bytes:
    """A key's whole value as bytes: strings, hash fields and values, list items, zset members."""
    kind = client.type(key).decode()
    if kind == "string":
        return bytes(client.get(key) or b"")
    if kind == "hash":
        return b"\n".join(k + b"=" + v for k, v in client.hgetall(key).items())
    if kind == "list":
        return b"\n".join(client.lrange(key, 0, -1))
    if kind == "zset":
        return b"\n".join(m for m, _ in client.zrange(key, 0, -1, withscores=True))
    return b""


class TestRedisRecallContract(RecallStoreContract):
    """Runs once per server flavour (the ``server`` fixture is parametrized: redis, valkey)."""

    @pytest.fixture
    def prefix(self) -> str:
        return new_prefix()

    @pytest.fixture
    async def recall_store(self, server: ServerProcess, prefix: str) -> AsyncIterator[RedisRecallStore]:
        store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
        yield store
        await store.aclose()

    @pytest.fixture
    def raw_storage(self, server: ServerProcess, prefix: str) -> RawStorage:
        """Every key under the prefix: its name and whole value (the test scans; the store never does)."""

        def read() -> bytes:
            client = redis.Redis.from_url(server.url)
            try:
                out = bytearray()
                for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                    out += key + b"\n" + dump_value(client, key) + b"\n"
                return bytes(out)
            finally:
                client.close()

        return read

    @pytest.fixture
    def corrupt_indexed_group(self, server: ServerProcess, prefix: str) -> Callable[..., None]:
        """Rewrites an indexed group's canonical bytes (``P:c:<n>``) with a plain client, behind the store."""

        def corrupt(key: SessionKey, seq: int, transform: Callable[[bytes], bytes]) -> None:
            client = redis.Redis.from_url(server.url)
            try:
                tenant = tenant_prefix(prefix, key.tenant)
                row = client.hget(f"{tenant}:ids", group_source_id(key, seq))
                if row is None:
                    raise LookupError(f"group {seq} of {key} is not indexed")
                data = client.get(f"{tenant}:c:{row.decode()}")
                if data is None:
                    raise LookupError(f"group {seq} of {key} keeps no canonical bytes")
                client.set(f"{tenant}:c:{row.decode()}", transform(data))
            finally:
                client.close()

        return corrupt

    @pytest.fixture
    def corrupt_indexed_text(self, server: ServerProcess, prefix: str) -> Callable[..., None]:
        """Rewrites a document's text (``P:t:<n>``) with a plain client; its row and digests stay."""

        def corrupt(ref: SourceRef, transform: Callable[[bytes], bytes]) -> None:
            owner = source_owner(ref.source_id)
            assert owner is not None
            client = redis.Redis.from_url(server.url)
            try:
                tenant = tenant_prefix(prefix, owner.tenant)
                row = client.hget(f"{tenant}:ids", ref.source_id)
                if row is None:
                    raise LookupError(f"{ref.source_id} is not indexed")
                key = f"{tenant}:t:{row.decode()}"
                client.set(key, transform(client.get(key) or b""))
            finally:
                client.close()

        return corrupt
