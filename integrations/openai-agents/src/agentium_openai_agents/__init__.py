"""Agentium under the OpenAI Agents SDK: a ``Session`` whose history is Agentium canonical history.

``AgentiumSession(runtime, identity, session_id)`` is passed as ``session=``
to ``Runner.run``, ``Runner.run_sync`` or ``Runner.run_streamed``. Every item
is kept exactly (``Message.payload``, format :data:`ITEM_FORMAT`) with
readable text beside it; pop and clear move the session's view and delete
nothing. Messages Agentium's own ``run()`` committed read back as the items
the SDK would have stored (``function_call`` and ``function_call_output``
items for its tool calls and results). See this distribution's README and ``docs/history-api.md``.
"""

from __future__ import annotations

from ._errors import ForeignItemError, HistoryChangedError, PopRefusedError, SessionClosedError
from ._item_message import ITEM_FORMAT, MAX_CONTENT_CHARS, item_to_message
from ._items import message_to_item, message_to_items
from ._session import AgentiumSession

__version__ = "0.1.0"

__all__ = [
    "ITEM_FORMAT",
    "MAX_CONTENT_CHARS",
    "AgentiumSession",
    "ForeignItemError",
    "HistoryChangedError",
    "PopRefusedError",
    "SessionClosedError",
    "__version__",
    "item_to_message",
    "message_to_item",
    "message_to_items",
]
