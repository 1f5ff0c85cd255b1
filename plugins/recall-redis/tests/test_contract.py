"""The core's RecallStoreContract, unchanged, on a real Redis and a real Valkey server (R9-R13, R17, R24)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis_servers import ServerProcess, new_prefix

from agentium_harness.testing import RecallStoreContract
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore


class TestRedisRecallContract(RecallStoreContract):
    """Runs once per server flavour (the ``server`` fixture is parametrized: redis, valkey)."""

    @pytest.fixture
    async def recall_store(self, server: ServerProcess) -> AsyncIterator[RedisRecallStore]:
        store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
        yield store
        await store.aclose()
