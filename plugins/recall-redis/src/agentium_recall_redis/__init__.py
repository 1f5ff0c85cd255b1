"""``agentium-recall-redis``: a scoped Redis / Valkey recall store for Agentium.

Select it in a config file with ``[recall] plugin = "redis"`` (options:
:class:`RedisRecallConfig`), or build it directly and pass it to
``create_harness_runtime(recall=...)``, optionally lending it a
``redis.asyncio.Redis`` client. See the distribution's README.
"""

from __future__ import annotations

from .config import DEFAULT_URL, RedisRecallConfig, redact_url
from .errors import (
    RedisRecallAuthError,
    RedisRecallConnectionError,
    RedisRecallDamagedError,
    RedisRecallError,
    RedisRecallLayoutError,
    RedisRecallServerError,
    RedisRecallTimeoutError,
    RedisRecallValueTooLargeError,
)
from .link import ServerReport
from .store import RedisRecallSession, RedisRecallStore

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "RedisRecallAuthError",
    "RedisRecallConfig",
    "RedisRecallConnectionError",
    "RedisRecallDamagedError",
    "RedisRecallError",
    "RedisRecallLayoutError",
    "RedisRecallServerError",
    "RedisRecallSession",
    "RedisRecallStore",
    "RedisRecallTimeoutError",
    "RedisRecallValueTooLargeError",
    "ServerReport",
    "__version__",
    "redact_url",
]
