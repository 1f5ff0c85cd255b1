"""Items of the host's own types: what ``add_items`` checks is what it stores.

``append`` stores a ``dict`` subclass as the plain JSON it holds (read with
the base type's methods), never as its own ``get`` or ``__getitem__`` says.
``add_items`` checked an item's shape, and took its role and text, through
the item's own ``get``: a subclass whose ``get`` answers other than what it
holds (one normalizing its keys, say) passed the check with a stored value
of no input item's shape, and every later ``get_items`` failed on it as
damage (the session unreadable until cleared).
"""

from __future__ import annotations

from typing import Any

import pytest
from sdk_sessions import ANA

from agentium_harness import HarnessRuntime, InvalidArgumentError, InvalidPayloadError, Role
from agentium_openai_agents import AgentiumSession, ForeignItemError, item_to_message

pytestmark = pytest.mark.anyio


class LowerKeys(dict[str, Any]):
    """A dict looking keys up case-insensitively: ``get("type")`` finds a stored ``"Type"``."""

    def get(self, key: Any, default: Any = None) -> Any:
        for stored, value in dict.items(self):
            if isinstance(key, str) and stored.lower() == key.lower():
                return value
        return default

    def __getitem__(self, key: Any) -> Any:
        found = self.get(key, KeyError)
        if found is KeyError:
            raise KeyError(key)
        return found


class SaysOutput(dict[str, Any]):
    """A dict whose ``get`` says it is a tool's output, whatever it holds."""

    def get(self, key: Any, default: Any = None) -> Any:
        said = {"type": "function_call_output", "call_id": "c1", "output": "page"}
        return said.get(key, default)


async def test_a_dict_subclass_holding_no_items_shape_is_refused_and_nothing_is_written(
    runtime: HarnessRuntime,
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([{"role": "user", "content": "hello"}])
    odd = LowerKeys({"Type": "message", "Role": "user", "Content": "hi"})
    with pytest.raises(ForeignItemError, match="nothing was written"):
        await session.add_items([odd])
    # Nothing written, and the session still reads.
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [m.payload for g in audit.groups for m in g.group.messages] == [
        {"role": "user", "content": "hello"}
    ]
    assert await session.get_items() == [{"role": "user", "content": "hello"}]


async def test_a_dict_subclass_is_stored_with_the_role_and_text_of_what_it_holds(
    runtime: HarnessRuntime,
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    item = SaysOutput({"role": "user", "content": "my own words"})
    await session.add_items([item])
    (message,) = (await runtime.read_history(ANA, "chat-1", max_groups=1)).messages
    assert (message.role, message.content, message.payload) == (
        Role.USER,
        "my own words",
        {"role": "user", "content": "my own words"},
    )
    assert await session.get_items() == [{"role": "user", "content": "my own words"}]


class ItemsRaise(dict[str, Any]):
    """A dict whose own ``items`` raises: read whole, as ``append`` reads it, it is refused."""

    def items(self) -> Any:
        raise RuntimeError("items")


async def test_a_dict_subclass_whose_own_items_raise_is_refused(runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    with pytest.raises(InvalidPayloadError, match="nothing was written"):
        await session.add_items([ItemsRaise({"role": "user", "content": "hi"})])
    assert (await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)).groups == ()


class NoLimitSaid(dict[str, Any]):
    """A dict whose own ``get`` says it holds no ``limit``, whatever it holds."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


@pytest.mark.parametrize("limit", [True, "3", 2.0])
async def test_session_settings_of_a_dict_subclass_are_checked_as_what_they_hold(
    runtime: HarnessRuntime, limit: object
) -> None:
    # The SDK's coercion reads what the dict holds: True would be a limit of 1, "3" one of 3.
    with pytest.raises(InvalidArgumentError, match=r"session_settings\.limit"):
        AgentiumSession(runtime, ANA, "chat-1", session_settings=NoLimitSaid(limit=limit))


class TextSaid(dict[str, Any]):
    """A content part whose own reads say other words than it holds (``append`` stores what it holds)."""

    def get(self, key: Any, default: Any = None) -> Any:
        return "words it does not hold" if key == "text" else dict.get(self, key, default)

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __contains__(self, key: object) -> bool:
        return True


class SaysUser(str):
    """A str whose ``==`` and hash say ``"user"``, whatever its characters (``append`` stores those)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return other == "user"

    def __hash__(self) -> int:
        return hash("user")


class SaysEverything(str):
    """A str equal to everything: ``"reasoning"`` held, ``== "function_call"`` says ``True``."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class ShownOtherwise(str):
    """A str formatted (an f-string) as other characters than it holds."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return "characters it does not hold"


def _odd_items() -> list[tuple[str, dict[str, Any]]]:
    part = {"type": "input_text", "text": "my own words"}
    return [
        ("a content part of the host's own", {"role": "user", "content": [TextSaid(part)]}),
        ("in a dict subclass item", LowerKeys({"role": "user", "content": [TextSaid(part)]})),
        ("a str role of the host's own", {"role": SaysUser("assistant"), "content": "the model's words"}),
        ("a str type of the host's own", {"type": SaysEverything("reasoning"), "id": "r1", "summary": []}),
        (
            "a str name of the host's own",
            {"type": "function_call", "call_id": "c1", "name": ShownOtherwise("search"), "arguments": "{}"},
        ),
        (
            "a str output of the host's own",
            {"type": "function_call_output", "call_id": "c1", "output": ShownOtherwise("page")},
        ),
        (
            "a str part type of the host's own",
            {"role": "user", "content": [{"type": ShownOtherwise("input_image"), "image_url": "u"}]},
        ),
    ]


@pytest.mark.parametrize(("case", "item"), _odd_items(), ids=[case for case, _ in _odd_items()])
async def test_an_item_of_host_types_is_read_as_what_is_stored(
    runtime: HarnessRuntime, case: str, item: dict[str, Any]
) -> None:
    # What append stores is what the item holds (read with the base types' own methods): the role,
    # readable content and tool_call_id add_items gives the message (what recall indexes, what
    # summaries and run() read) are those of that stored item, never what the host's own
    # methods say; and the stored item reads back with get_items as it was stored.
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([item])
    (message,) = (await runtime.read_history(ANA, "chat-1", max_groups=1)).messages
    stored = message.payload
    assert isinstance(stored, dict)
    plain = item_to_message(stored)  # the stored item is plain JSON: no method of the host's runs
    assert (message.role, message.content, message.tool_call_id) == (
        plain.role,
        plain.content,
        plain.tool_call_id,
    ), case
    assert await session.get_items() == [stored]


class OnlyItemsTrue(dict[str, Any]):
    """A dict whose ``items`` is honest; its other reads (keys, lookups, ``get``) say a system message."""

    def __iter__(self) -> Any:
        return iter(["role"])

    def keys(self) -> Any:
        return ["role"]

    def __getitem__(self, key: Any) -> Any:
        return "system"

    def get(self, key: Any, default: Any = None) -> Any:
        return "system" if key == "role" else default


async def test_a_dict_subclass_is_stored_exactly_as_checked_whatever_its_keys_say(
    runtime: HarnessRuntime,
) -> None:
    # Core's canonical encoding reads the item's own items() and append refuses it unless that
    # is what the dict holds (dict.items): so what is stored is what add_items checked.
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([OnlyItemsTrue({"role": "user", "content": "hi", "id": "m1"})])
    (message,) = (await runtime.read_history(ANA, "chat-1", max_groups=1)).messages
    assert (message.role, message.content) == (Role.USER, "hi")
    assert type(message.payload) is dict
    assert message.payload == {"role": "user", "content": "hi", "id": "m1"}
    assert await session.get_items() == [{"role": "user", "content": "hi", "id": "m1"}]


class LimitSaidByKeys(dict[str, Any]):
    """A dict holding nothing, whose keys and lookups (what ``**`` reads of it) say it holds ``limit``."""

    said: object = None

    def __iter__(self) -> Any:
        return iter(["limit"])

    def keys(self) -> Any:
        return ["limit"]

    def __getitem__(self, key: Any) -> Any:
        return self.said


@pytest.mark.parametrize("limit", [True, "3", 2.0])
async def test_session_settings_are_checked_as_what_the_sdk_reads_of_them(
    runtime: HarnessRuntime, limit: object
) -> None:
    # The SDK's coercion (SessionSettings(**settings)) reads a dict subclass with its own
    # __iter__ through keys() and __getitem__: it made a limit said so of 1, 3 or 2, past the
    # check of what the dict holds. Now the one view (what it holds) is checked and coerced.
    settings = LimitSaidByKeys()
    settings.said = limit
    session = AgentiumSession(runtime, ANA, "chat-1", session_settings=settings)
    assert session.session_settings.limit is None  # it holds no limit
    held = LimitSaidByKeys(limit=limit)
    held.said = 5  # what its keys and lookups say is a good limit; what it holds is not
    with pytest.raises(InvalidArgumentError, match=r"session_settings\.limit"):
        AgentiumSession(runtime, ANA, "chat-1", session_settings=held)


class ClaimsStr:
    """An object whose ``__class__`` says it is a str (``isinstance`` believes it; ``type()`` does not)."""

    @property
    def __class__(self) -> type:  # type: ignore[override]
        return str


async def test_a_role_claiming_to_be_a_str_is_refused_typed_and_nothing_is_written(
    runtime: HarnessRuntime,
) -> None:
    # check_item_shape took it for a str and read its characters with str.__str__, which raised a
    # bare TypeError out of add_items.
    session = AgentiumSession(runtime, ANA, "chat-1")
    with pytest.raises(ForeignItemError, match="nothing was written"):
        await session.add_items([{"role": "user", "content": "hi"}, {"role": ClaimsStr(), "content": "x"}])
    assert (await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)).groups == ()


class SettlesWhenRead(dict[str, Any]):
    """A dict that fills in what it holds when read whole (its own ``items``): a ``tool`` role here."""

    def items(self) -> Any:
        dict.__setitem__(self, "role", "tool")
        return dict.items(self)


async def test_a_dict_subclass_changing_when_read_whole_is_refused_and_nothing_is_written(
    runtime: HarnessRuntime,
) -> None:
    # add_items checked what it held (a user message); append's encoding then ran its own items(),
    # which changed it to a tool role: stored with no input item's shape, every later get_items
    # failed on it as damage (the session unreadable until cleared).
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([{"role": "user", "content": "hello"}])
    with pytest.raises(InvalidPayloadError, match="nothing was written"):
        await session.add_items([SettlesWhenRead({"role": "user", "content": "hi"})])
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [m.payload for g in audit.groups for m in g.group.messages] == [
        {"role": "user", "content": "hello"}
    ]
    assert await session.get_items() == [{"role": "user", "content": "hello"}]
