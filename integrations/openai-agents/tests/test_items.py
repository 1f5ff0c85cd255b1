"""item_to_message: the role and readable content of every kind of SDK item, held to a reference."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentium_harness import InvalidArgumentError, Message, Role
from agentium_openai_agents import ITEM_FORMAT, MAX_CONTENT_CHARS, item_to_message, message_to_item

# The mapping as item_to_message wrote it before it read role and text in one pass (with the
# ABC's isinstance for every mapping): the reference it must keep to, item for item.
_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM, "developer": Role.SYSTEM}


def _parts(parts: object) -> str:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                texts.append(text)
            elif isinstance(part.get("type"), str):
                texts.append(f"[{part['type']}]")
    return "\n".join(texts)


def _readable(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        return _parts(item.get("content"))
    if kind == "function_call":
        return f"[function_call {item.get('name', '?')}] {item.get('arguments', '')}"
    if isinstance(kind, str) and kind.endswith("_output"):
        output = item.get("output")
        text = output if isinstance(output, str) else _parts(output)
        if not text and output is not None:
            try:
                text = json.dumps(output, ensure_ascii=False, allow_nan=False)[:MAX_CONTENT_CHARS]
            except (TypeError, ValueError):  # not plain JSON (a mapping that is no dict): append refuses it
                text = ""
        return f"[{kind} {item.get('call_id', '?')}] {text}"
    if kind == "reasoning":
        return "[reasoning] " + _parts(item.get("summary"))
    return f"[{kind if isinstance(kind, str) else 'item'}]"


def _role(item: Mapping[str, Any]) -> Role:
    kind = item.get("type")
    role = item.get("role")
    if isinstance(role, str) and kind in (None, "message"):
        mapped = _ROLES.get(role)
        if mapped is not None:
            return mapped
    if isinstance(kind, str) and kind.endswith("_output"):
        return Role.TOOL  # a tool's output: ``user`` before run() was found sending it as the user's words
    return Role.ASSISTANT


def _reference(item: Mapping[str, Any]) -> Message:
    text = _readable(item)
    if len(text) > MAX_CONTENT_CHARS:
        text = text[: MAX_CONTENT_CHARS - 1] + "…"
    role = _role(item)
    call_id = item.get("call_id") if role is Role.TOOL else None
    if not (isinstance(call_id, str) and 0 < len(call_id) <= 256 and call_id.isprintable()):
        call_id = None  # an id core would refuse: the item keeps it, the message names none
    return Message(role, text, tool_call_id=call_id, payload=item, payload_format=ITEM_FORMAT)


WORDS = st.text(max_size=6)
KINDS = st.one_of(
    st.none(),
    st.sampled_from(
        ["message", "function_call", "function_call_output", "computer_call_output", "reasoning"]
    ),
    st.sampled_from(["web_search_call", "_output", "output", "item_reference"]),
    st.integers(0, 2),
)
ROLES = st.one_of(
    st.sampled_from(["user", "assistant", "system", "developer", "tool", "User"]), st.integers(0, 1)
)
PART = st.one_of(
    WORDS,
    st.integers(0, 3),
    st.builds(
        MappingProxyType,  # a part that is a mapping but no dict
        st.fixed_dictionaries({}, optional={"type": st.just("output_text"), "text": WORDS, "refusal": WORDS}),
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(st.sampled_from(["output_text", "input_image", "refusal"]), st.integers(0, 1)),
            "text": st.one_of(WORDS, st.none(), st.integers(0, 1)),
            "refusal": st.one_of(WORDS, st.none()),
        },
    ),
)
CONTENT = st.one_of(
    WORDS,
    st.none(),
    st.integers(0, 3),
    st.lists(PART, max_size=3),
    st.integers(16_380, 16_390).map(lambda n: "é" * n),
)
ITEMS = st.fixed_dictionaries(
    {},
    optional={
        "type": KINDS,
        "role": ROLES,
        "content": CONTENT,
        "name": WORDS,
        "arguments": WORDS,
        "call_id": WORDS,
        "output": st.one_of(CONTENT, st.dictionaries(WORDS, st.integers(), max_size=2), st.just([])),
        "summary": st.lists(PART, max_size=2),
    },
)


@settings(max_examples=400, deadline=None)
@given(ITEMS, st.booleans())
@example({"type": "function_call_output", "output": [MappingProxyType({})]}, False)  # not plain JSON: no text
def test_item_to_message_gives_each_item_its_role_and_readable_content(
    item: dict[str, Any], proxy: bool
) -> None:
    given_item: Mapping[str, Any] = MappingProxyType(item) if proxy else item  # a mapping that is no dict
    assert item_to_message(given_item) == _reference(given_item)


@pytest.mark.parametrize("bad", ["hello", None, {"role": "user", "content": "hi"}, 5])
def test_message_to_item_refuses_what_is_not_a_message_with_the_typed_error(bad: object) -> None:
    # It raised AttributeError ('str' object has no attribute 'payload_format').
    with pytest.raises(InvalidArgumentError, match="message must be a Message"):
        message_to_item(bad, "message 0")  # type: ignore[arg-type]
    assert message_to_item(Message(Role.USER, "hi"), "message 0") == {"role": "user", "content": "hi"}
