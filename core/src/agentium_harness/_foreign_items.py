"""Tool outputs two integrations stored as ``user`` messages, recognised by their payload.

Before they stored a framework's tool output as a ``tool`` message, the OpenAI
Agents SDK and Agent Framework integrations stored it as a ``user`` message
holding the item. Stored history is never rewritten, so what shows such rows
to a model (``run()``'s history, a summarizer) recognises them here and
never presents them as the user's words.
"""

from __future__ import annotations

from typing import Final

from ._history import Message, Role

__all__ = ["legacy_tool_output"]

#: ``payload_format`` of the OpenAI Agents SDK integration's items (agentium-openai-agents).
_OPENAI_ITEM: Final = "openai.responses.input_item/v1"
#: ``payload_format`` of the Agent Framework integration's messages (agentium-agent-framework).
_AF_MESSAGE: Final = "agent_framework.message/v1"


def legacy_tool_output(message: Message) -> bool:
    """Whether ``message`` is a tool result one of those integrations stored as a ``user`` message.

    The OpenAI Agents SDK integration stored as ``user`` its message items
    (no ``type``, or ``"message"``) of the user's role and its ``*_output``
    items: a ``user`` message holding an item of any other ``type`` is an
    output. The Agent Framework integration stored its ``tool`` messages as
    ``user``. A user's own message is neither, in either format.
    """
    if message.role is not Role.USER or message.payload_format is None:
        return False
    payload = message.payload
    if type(payload) is not dict:
        return False
    if message.payload_format == _OPENAI_ITEM:
        kind = payload.get("type")
        return isinstance(kind, str) and kind != "message"
    if message.payload_format == _AF_MESSAGE:
        return payload.get("role") == "tool"
    return False
