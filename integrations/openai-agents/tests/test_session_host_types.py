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
from agentium_openai_agents import AgentiumSession, ForeignItemError

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
    """A dict whose own ``items`` raises: ``append``'s own check of it still runs (and refuses it)."""

    def items(self) -> Any:
        raise RuntimeError("items")


async def test_a_dict_subclass_is_still_checked_by_append_itself(runtime: HarnessRuntime) -> None:
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
