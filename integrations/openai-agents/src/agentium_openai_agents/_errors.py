"""Errors of the OpenAI Agents SDK integration (rooted at ``AgentiumError``)."""

from __future__ import annotations

from agentium_harness import AgentiumError, InvalidArgumentError

__all__ = ["ForeignItemError", "HistoryChangedError", "PopRefusedError", "SessionClosedError"]


class ForeignItemError(InvalidArgumentError):
    """An item is not an SDK item, or committed history holds something that is not one.

    On ``add_items`` nothing was written. On ``get_items`` or ``pop_item`` the
    read failed closed: no item was skipped and nothing was changed, except
    in one case, which ``commit_state`` ``committed`` marks: the session was
    erased and its id used again during a ``pop_item``, whose retraction then
    took the new session's last message, another framework's item.
    """


class PopRefusedError(ForeignItemError):
    """``pop_item`` cannot take the view's last message out as one item; nothing was changed.

    A message Agentium's own ``run()`` committed (no payload) can stand for
    several SDK items: an assistant message's text and each tool call it
    made. Core retracts whole messages, so popping one of those would take
    items out of the session without returning them. A tool result is one
    item, but retracting it alone would leave its ``function_call`` without
    output in the view. Either is refused: ``clear_session()`` starts the
    view afresh, and the runtime's ``retract(identity, session_id,
    count=n, reason=...)`` takes out the last ``n`` whole messages and
    returns them all. The one exception is the one ``ForeignItemError``
    names: if the retraction took another message than the one read (an
    erasure and the id used again came between, on a store that hands out
    a revision twice), it was retracted, the error says so and its
    ``commit_state`` is ``committed``.
    """


class HistoryChangedError(AgentiumError):
    """The session's view kept changing under a call, every time it was retried; nothing was changed.

    ``get_items`` read several pages and the view changed between them;
    ``pop_item`` or ``clear_session`` read the view and the session moved on
    before their retraction or reset. Another writer appended, retracted or
    reset the view, or an operator erased the session, each time: at least 3
    times, and for ``busy_timeout_s``. Call the method again.
    """


class SessionClosedError(AgentiumError, RuntimeError):
    """The session was closed; it admits no more operations (create a new one)."""
