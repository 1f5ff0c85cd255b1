"""The history ``run()`` sends the model: the path for a view without retractions equals the general one.

Most sessions have no retraction in their view, and ``model_history`` then
walks the groups without the span look-ups; whatever the groups and the
view's start, it must send exactly what the span-aware path sends when no
span touches them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import Message, MessageGroup, RetainedRecord, Role, Scope, ToolCall
from agentium_harness._engine.history_view import model_history
from agentium_harness._history import ControlKind, HistoryControl, RetractedSpan, ViewState

SCOPE = Scope("t", "u", "s")
FAR = 10**6  # a span no group reaches: the general path, touching nothing


@st.composite
def histories(draw: st.DrawFn) -> list[MessageGroup]:
    groups = []
    for seq in range(draw(st.integers(0, 6))):
        if draw(st.integers(0, 4)) == 0:
            control = HistoryControl(draw(st.sampled_from(ControlKind)), "why")
            groups.append(MessageGroup(seq, (), RetainedRecord(SCOPE), control=control))
            continue
        messages = []
        for n in range(draw(st.integers(1, 3))):
            payload = draw(st.one_of(st.none(), st.just({"item": n})))
            calls = (ToolCall(f"c{n}", "t", {"a": n}),) if draw(st.booleans()) else ()
            messages.append(
                Message(
                    draw(st.sampled_from(Role)),
                    draw(st.text(max_size=5)),
                    calls,
                    payload=payload,
                    payload_format=None if payload is None else "x/v1",
                )
            )
        groups.append(MessageGroup(seq, tuple(messages), RetainedRecord(SCOPE)))
    return groups


@settings(max_examples=300, deadline=None)
@given(histories(), st.one_of(st.none(), st.integers(0, 7)))
def test_a_view_without_retractions_sends_what_the_span_aware_path_sends(
    groups: list[MessageGroup], start: int | None
) -> None:
    view = None if start is None else ViewState(start=start)
    general = ViewState(start=start or 0, spans=(RetractedSpan(FAR, 0, FAR),))
    sent = model_history(groups, view)
    assert sent == model_history(groups, general)
    assert all(m.payload is None and m.payload_format is None for m in sent)
    # Messages without a payload are sent as they are (no copy).
    plain = [m for g in groups if g.seq >= (start or 0) for m in g.messages if m.payload is None]
    assert [m for m in sent if any(m is p for p in plain)] == plain
