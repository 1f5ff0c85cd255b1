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


def unmarked(space: dict[bytes, Any]) -> dict[bytes, Any]:
    """``space`` with the layout key an erase's fence raise marked (``5``, for older writers) read as ``4``.

    An erase of this version marks the tenant when it raises its fence, before anything fails it (the
    README's "Rolling upgrades"): a test that checks a failed erase changed nothing compares the rest,
    and checks the mark itself with :func:`marked`.
    """
    return {
        k: ("string", b"4") if k.endswith(b":v") and v == ("string", b"5") else v for k, v in space.items()
    }


def marked(space: dict[bytes, Any]) -> bool:
    """Whether the tenant's layout key in ``space`` holds the erase's mark (``5``)."""
    return [v for k, v in space.items() if k.endswith(b":v")] == [("string", b"5")]
