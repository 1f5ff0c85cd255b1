"""The whole key space under a prefix, for tests that check a failed write changed nothing.

Only tests scan: the store itself never uses ``KEYS`` or ``SCAN``.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis


async def key_space(admin: aioredis.Redis, prefix: str) -> dict[bytes, Any]:
    """Every key under ``prefix`` with its type and whole value (the test may SCAN; the store never does)."""
    out: dict[bytes, Any] = {}
    async for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
        kind = (await admin.type(key)).decode()
        if kind == "string":
            value: Any = await admin.get(key)
        elif kind == "hash":
            value = await admin.hgetall(key)
        elif kind == "zset":
            value = await admin.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            value = await admin.lrange(key, 0, -1)
        else:
            value = await admin.smembers(key) if kind == "set" else None
        out[key] = (kind, value)
    return out
