"""The session's view: which committed messages it shows after its retractions and view resets.

Canonical history only grows. ``retract`` and ``reset_view`` append control
groups (:class:`~agentium_harness._history.HistoryControl`) and move the
session's :class:`~agentium_harness._history.ViewState`, saved in the same
snapshot: the view is every message of the groups from ``view.start`` on,
except those inside its retracted spans. A retraction always takes the
*last* messages of the view, so everything from its first message through
its own control group is out of the view: one span, merged with the span
just before it when no visible message lies between them. Spans therefore
stay disjoint and ascending, and a page of the view is found without reading
a retracted group.

This module is pure: what the view shows of a group, the history ``run()``
sends the model, which recall sources it hides, and how a retraction or a
reset moves the view.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

import attrs

from .._history import Message, MessageGroup, MessageRef, RetractedSpan, Role, ViewState
from .._ports.erasure_target import SeqRange
from .._ports.recall import group_source_id
from .._scope import SessionKey
from .foreign_results import for_model

#: A message's payload and its format; ``_NO_PAYLOAD`` for a message of plain text (most).
_PAYLOAD_PARTS: Final = operator.attrgetter("payload", "payload_format")
_NO_PAYLOAD: Final = (None, None)

__all__ = [
    "ViewIndex",
    "after_reset",
    "after_retraction",
    "model_groups",
    "model_history",
    "paired_messages",
    "memory_hidden",
    "recall_hidden",
]


class ViewIndex:
    """Span lookups over one :class:`ViewState` (built once per operation)."""

    __slots__ = ("_lasts", "view")

    def __init__(self, view: ViewState | None) -> None:
        self.view = view if view is not None else ViewState()
        # Spans are disjoint and ascending, so their last seqs are ascending too.
        self._lasts = [s.last_seq for s in self.view.spans]

    def span_at(self, seq: int) -> RetractedSpan | None:
        """The span holding at least one message of group ``seq``, if any."""
        i = bisect.bisect_left(self._lasts, seq)
        if i < len(self._lasts) and self.view.spans[i].first_seq <= seq:
            return self.view.spans[i]
        return None

    def shown(self, seq: int) -> int | None:
        """How many leading messages of group ``seq`` the view shows: ``None`` for all of them."""
        if seq < self.view.start:
            return 0
        span = self.span_at(seq)
        if span is None:
            return None
        return span.first_index if seq == span.first_seq else 0

    def shown_indexes(self, group: MessageGroup) -> tuple[int, ...]:
        """Indexes of ``group``'s messages the view shows (none for a control group)."""
        if group.control is not None:
            return ()
        n = self.shown(group.seq)
        return tuple(range(len(group.messages) if n is None else min(n, len(group.messages))))

    def touched(self, seq: int) -> bool:
        """True when group ``seq`` is before the view or a retraction took any of its messages."""
        return seq < self.view.start or self.span_at(seq) is not None

    def visible_desc(self, before: int) -> Iterator[tuple[int, int | None]]:
        """``(seq, shown)`` of each group below ``before`` with a message in view, newest first.

        Retracted groups are stepped over by their span, never read: a
        group inside a span is out of the view whole, and the span's first
        group shows only the messages before ``first_index``.
        """
        seq = before - 1
        while seq >= self.view.start:
            span = self.span_at(seq)
            if span is None:
                yield seq, None
                seq -= 1
                continue
            if span.first_index > 0 and span.first_seq >= self.view.start:
                yield span.first_seq, span.first_index
            seq = span.first_seq - 1


def after_retraction(view: ViewState | None, targets: Sequence[MessageRef], control_seq: int) -> ViewState:
    """The view once the last ``len(targets)`` visible messages (``targets``, ascending) are retracted.

    Everything from the first target through the control group at
    ``control_seq`` leaves the view. When the target is a group's first
    message and the group before it ends inside a span, no visible message
    lies between them and the two spans become one.
    """
    index = ViewIndex(view)
    current = index.view
    first = targets[0]
    spans = [s for s in current.spans if (s.first_seq, s.first_index) < (first.seq, first.index)]
    start = (first.seq, first.index)
    if first.index == 0 and first.seq - 1 >= current.start:
        before = ViewIndex(attrs.evolve(current, spans=tuple(spans))).span_at(first.seq - 1)
        if before is not None:
            spans.remove(before)
            start = (before.first_seq, before.first_index)
    spans.append(RetractedSpan(start[0], start[1], control_seq))
    return ViewState(current.start, tuple(spans), current.retracted + len(targets))


def after_reset(control_seq: int) -> ViewState:
    """The view once a reset is committed at ``control_seq``: it starts after it, empty."""
    return ViewState(start=control_seq + 1)


def paired_messages(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` without half a tool exchange: what the model may be sent of a partly retracted group.

    A tool result whose call is not among ``messages`` is left out; a tool
    call whose result is not among them is left out of its assistant
    message, and that message too when nothing else is left of it. Results
    answer the earliest open call with their id, as in
    :attr:`MessageGroup.is_complete`. A foreign tool result (one with a
    ``payload``) answering no call is kept: it is no half of an exchange of
    core's (:func:`~agentium_harness._history.match_tool_results`).
    """
    open_calls: dict[str, list[tuple[int, int]]] = {}
    orphans: set[int] = set()
    for i, message in enumerate(messages):
        for j, call in enumerate(message.tool_calls):
            open_calls.setdefault(call.id, []).append((i, j))
        if message.role is Role.TOOL:
            pending = open_calls.get(message.tool_call_id or "")
            if message.tool_call_id is not None and pending:
                pending.pop(0)
            elif message.payload is None:
                orphans.add(i)
    unanswered = {pos for positions in open_calls.values() for pos in positions}
    out: list[Message] = []
    for i, message in enumerate(messages):
        if i in orphans:
            continue
        if message.tool_calls and any((i, j) in unanswered for j in range(len(message.tool_calls))):
            calls = tuple(c for j, c in enumerate(message.tool_calls) if (i, j) not in unanswered)
            if not calls and not message.content:
                continue
            message = attrs.evolve(message, tool_calls=calls)
        out.append(message)
    return tuple(out)


def model_history(groups: Iterable[MessageGroup], view: ViewState | None) -> tuple[Message, ...]:
    """The messages of ``groups`` that ``run()`` sends the model as history, in order.

    Control groups send nothing (a control record is never shown as a
    message); a group before the view sends nothing; a partly retracted
    group sends the messages the view shows, without half a tool exchange
    (:func:`paired_messages`). Payloads are left out: the model reads ``content``.
    A foreign framework's tool result is sent as a ``tool_output`` source
    block, never as a message of the user, the system or the assistant
    (:func:`.foreign_results.for_model`).
    """
    return tuple(m for _seq, messages in model_groups(groups, view) for m in messages)


def model_groups(
    groups: Iterable[MessageGroup], view: ViewState | None
) -> Iterator[tuple[int, Sequence[Message]]]:
    """:func:`model_history` by group: each group that sends a message, as its ``seq`` and those messages.

    The seq is what names a call the request sends under an id of its own
    (:func:`.call_ids.distinct_history`): it is the group's for good, where
    its place in the request moves as older groups leave the resident window.
    """
    if view is None or not view.spans:
        # No retraction in the view (most sessions): every group from its start shows all.
        start = 0 if view is None else view.start
        for group in groups:
            if group.control is None and group.seq >= start and group.messages:
                held = group.messages
                # Any payload or payload format, looked for at C speed (a generator per group was a
                # tenth of a turn's engine calls): a message of plain text has ``(None, None)``.
                if list(map(_PAYLOAD_PARTS, held)).count(_NO_PAYLOAD) != len(held):
                    yield group.seq, for_model(held, group.seq)
                else:
                    yield group.seq, held  # no foreign item (most groups): sent as they are
        return
    index = ViewIndex(view)
    for group in groups:
        if group.control is not None:
            continue
        shown = index.shown(group.seq)
        if shown == 0:
            continue
        messages: Sequence[Message] = group.messages
        if shown is not None:
            messages = paired_messages(messages[:shown])
        sent = for_model(messages, group.seq)
        if sent:
            yield group.seq, sent


def recall_hidden(
    key: SessionKey, view: ViewState | None, erased: Sequence[SeqRange] | None = None
) -> Callable[[str], bool] | None:
    """Which recall source ids are not this run's to show: this session's groups hidden or erased.

    A group a retraction touched is hidden whole (its excerpt could quote
    the retracted message), and so is every group before the view's start.
    A group an erasure removed (``erased``, the snapshot's ranges) is no
    history any more: a store still answering with it (an index row its
    erasure missed, a stale replica) is not trusted on it, so its excerpt
    never reaches the model. ``None`` when nothing is hidden.
    """
    spans = tuple(erased or ())
    if (view is None or (view.start == 0 and not view.spans)) and not spans:
        return None
    index = ViewIndex(view)
    prefix = group_source_id(key, 0)[:-1]

    def hidden(source_id: str) -> bool:
        if not source_id.startswith(prefix):
            return False
        tail = source_id[len(prefix) :]
        if not (tail.isdigit() and tail.isascii()):
            return False
        seq = int(tail)
        return index.touched(seq) or any(seq in span for span in spans)

    return hidden


def memory_hidden(key: SessionKey, view: ViewState | None) -> Callable[[str, int], bool] | None:
    """Which memory provenance ``(session, seq)`` the view hides: as :func:`recall_hidden`, this session's.

    A fact drawn from a group a retraction touched or a reset cleared could
    restate what was taken out of the view, as that group's recall excerpt
    could. Another session's groups are not this view's to hide. ``None``
    when the view hides nothing.
    """
    if view is None or (view.start == 0 and not view.spans):
        return None
    index = ViewIndex(view)
    session = key.session

    def hidden(provenance_session: str, seq: int) -> bool:
        return provenance_session == session and index.touched(seq)

    return hidden
