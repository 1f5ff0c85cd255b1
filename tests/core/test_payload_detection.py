"""A message's payload is foreign whatever its value: ``0``, ``""``, ``{}``, ``[]`` and ``False`` count.

The turn's hot path looks for payloads at C speed (each message's payload
counted against ``None``), not by truthiness: a foreign item whose payload
is a falsy JSON value must still be sent as the engine rewrites foreign
items (:func:`.foreign_results.for_model`) and counted as sent by eviction.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentium_harness import Message, MessageGroup, ResidentLimits, Role
from agentium_harness._engine.history_view import model_groups
from agentium_harness._engine.resident import _tokens_sent, plan_eviction
from agentium_harness._history import tokens_and_size

FALSY = [0, "", {}, [], False]


def _group(seq: int, payload: Any) -> MessageGroup:
    """A framework's tool output (a ``tool`` message answering no call of core's) and an answer."""
    fmt = None if payload is None else "acme.tool_output/v1"
    output = Message(
        Role.TOOL, "a tool result " * 20, tool_call_id="call_1", payload=payload, payload_format=fmt
    )
    return MessageGroup(seq=seq, messages=(Message(Role.USER, "go"), output, Message(Role.ASSISTANT, "ok")))


@pytest.mark.parametrize("payload", FALSY, ids=repr)
def test_a_falsy_payload_is_sent_as_a_foreign_item(payload: Any) -> None:
    plain, foreign = _group(0, None), _group(1, payload)
    ((_, sent_plain), (_, sent_foreign)) = model_groups([plain, foreign], None)
    assert sent_plain is plain.messages  # plain text: sent as stored
    assert sent_foreign is not foreign.messages  # a foreign item: rewritten for the model


@pytest.mark.parametrize("payload", FALSY, ids=repr)
def test_eviction_counts_a_falsy_payloads_group_as_sent(payload: Any) -> None:
    foreign, last = _group(0, payload), _group(1, None)
    stored = tokens_and_size(foreign)[0] + tokens_and_size(last)[0]
    sent = _tokens_sent(foreign) + tokens_and_size(last)[0]
    assert sent > stored  # the premise: sent, the foreign group is bigger than stored
    # Room for both as stored, not as sent: the foreign group is evicted.
    plan = plan_eviction([foreign, last], ResidentLimits(max_groups=8, max_tokens=stored))
    assert [g.seq for g in plan.evict] == [0]
