"""Guards for the exact-type fast paths: each answers what the general path answers.

The request's token estimate (``messages_tokens``), the one empty erasure ledger every fence
that finds none shares, and the argument checks that hand back the very object they were given.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import Message, Role, SessionKey, ToolCall
from agentium_harness._engine.erasure_ledger import ledger_of
from agentium_harness._history_messages import message_tokens, messages_tokens
from agentium_harness._ports.erasure import ErasureLedger


@attrs.frozen(slots=True)
class _OwnEstimate(Message):
    """A subclass with an estimate of its own: the fast path must not count it as a plain message."""

    @property
    def estimated_tokens(self) -> int:
        return 1000


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(Message, st.sampled_from(list(Role)), _TEXT),
            st.builds(
                lambda text, name: Message(
                    Role.ASSISTANT, text, tool_calls=(ToolCall("c", name, {"a": text}),)
                ),
                _TEXT,
                st.text("abcxyz_", min_size=1, max_size=8),
            ),
            st.builds(_OwnEstimate, st.sampled_from(list(Role)), _TEXT),
        ),
        max_size=8,
    )
)
def test_messages_tokens_is_the_sum_of_each_messages_estimate(messages: list[Message]) -> None:
    want = sum(m.estimated_tokens for m in messages)
    assert messages_tokens(messages) == sum(map(message_tokens, messages)) == want
    assert messages_tokens(tuple(messages)) == want


def test_the_shared_empty_ledger_cannot_be_changed_and_a_change_is_a_copy() -> None:
    key = SessionKey("t", "u", "s")
    _, first = ledger_of(key, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.pages = 1  # type: ignore[misc]
    assert not hasattr(first, "__dict__") and type(first.records) is tuple
    changed = attrs.evolve(first, pages=1)
    assert changed is not first and changed.pages == 1
    revision, again = ledger_of(key, None)
    assert revision is None and again == ErasureLedger() and again.pages is None
