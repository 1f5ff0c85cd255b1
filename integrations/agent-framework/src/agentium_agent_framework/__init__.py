"""Agentium under Microsoft Agent Framework: a ``HistoryProvider`` over Agentium canonical history.

``AgentiumHistoryProvider(runtime, identity)`` is passed in an agent's
``context_providers``. Every message is kept exactly (``Message.payload``,
format :data:`MESSAGE_FORMAT`) with readable text beside it, one
``save_messages`` call is one group, and ``get_messages`` reads at most
``max_messages`` messages. See this distribution's README and
``docs/history-api.md``.
"""

from __future__ import annotations

from ._provider import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_MESSAGES,
    MESSAGE_FORMAT,
    AgentiumHistoryProvider,
    ForeignMessageError,
    MissingSessionIdError,
    ReplayCheckLimitError,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "MESSAGE_FORMAT",
    "AgentiumHistoryProvider",
    "ForeignMessageError",
    "MissingSessionIdError",
    "ReplayCheckLimitError",
    "__version__",
]
