"""The provider's errors and logs carry no message content: a stored message's words stay out of them.

Agentium's standard is no message content in logs or spans unless the host
opts in, and an error the library raises carries none either: hosts log
errors and send them to error trackers. A stored message that
``Message.from_dict`` cannot decode failed the load with the decoder's own
message in the error's text, and the framework's decoder quotes what it
read (a content's unknown key, the payload's ``type`` value). The error
now names only the exception's type and which message it was; the
decoder's exception stays its ``__cause__``, for a host to inspect on
purpose.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from agent_framework import Message as AFMessage

from agentium_agent_framework import MESSAGE_FORMAT, AgentiumHistoryProvider, ForeignMessageError
from agentium_harness import HarnessRuntime, Message, Role, VerifiedIdentity

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
#: Stands for a user's words; no hex digits run through it, so no digest or id can contain it.
MARKER = "ZQX-marker"
#: Stored payloads in the message format that the framework's decoder refuses, quoting the marker.
UNDECODABLE: dict[str, dict[str, Any]] = {
    # A content key the framework's Content does not take: TypeError naming the key.
    "key": {"type": "message", "role": "user", "contents": [{"type": "text", "text": "hi", MARKER: 1}]},
    # A payload whose type is not "message": ValueError quoting the type's value.
    "type": {"type": f"my words {MARKER}", "role": "user", "contents": []},
}


@pytest.mark.parametrize("case", sorted(UNDECODABLE))
async def test_an_undecodable_stored_message_fails_the_load_without_its_content(
    runtime: HarnessRuntime, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    payload = UNDECODABLE[case]
    with pytest.raises(Exception, match=MARKER) as decoded:  # the decoder does quote it
        AFMessage.from_dict(payload)
    await runtime.append(
        ANA,
        "chat-1",
        [
            Message(
                Role.USER,
                "fine",
                payload=AFMessage("user", ["fine"]).to_dict(),
                payload_format=MESSAGE_FORMAT,
            ),
            Message(Role.USER, "stored", payload=payload, payload_format=MESSAGE_FORMAT),
        ],
    )
    provider = AgentiumHistoryProvider(runtime, ANA)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ForeignMessageError) as refused:
        await provider.get_messages("chat-1")
    error = refused.value
    assert MARKER not in str(error) and MARKER not in repr(error)
    assert MARKER not in caplog.text
    # It names the exception's type and which message of the load, and keeps the exception.
    assert f"({decoded.type.__name__} raised by Message.from_dict)" in str(error)
    assert "message 1 of the view of session 'chat-1'" in str(error)
    assert type(error.__cause__) is decoded.type and MARKER in str(error.__cause__)
