"""The plugin module named by the ``agentium`` entry point: registers the ``redis`` recall store."""

from __future__ import annotations

from agentium_harness.plugin_api import AdapterSpec, Register, hookimpl

from .config import RedisRecallConfig
from .store import RedisRecallStore

__all__ = ["agentium_register_recall_stores"]


@hookimpl
def agentium_register_recall_stores(register: Register) -> None:
    """Register the Redis recall store as recall adapter ``redis`` (options: :class:`RedisRecallConfig`).

    Building it does no I/O; the store connects on its first call.
    """
    register(
        AdapterSpec(
            name="redis",
            adapter_class=RedisRecallStore,
            config_class=RedisRecallConfig,
            description="scoped recall on Redis >= 6.2 or Valkey: inverted index, 1 round trip per discovery",
        )
    )
