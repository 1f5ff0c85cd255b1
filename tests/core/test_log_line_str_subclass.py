"""A class name that is a ``str`` subclass is escaped in a log line all the same.

``type()`` takes a ``str`` subclass as a class's name, and ``__qualname__``
takes one too: its own ``isprintable`` (or ``__str__``) must not vouch for
itself, or a WARNING naming an adapter's error by its class
(:func:`~agentium_harness._observe.state.error_type`, as the memory and
document fences' do) writes its line breaks and ANSI escapes as they are
(docs/observability.md: one record, one line).
"""

from __future__ import annotations

import logging

import pytest

from agentium_harness import MemoryFact, MemoryManager
from agentium_harness._engine.memory_fence import fence_memory
from agentium_harness._observe.logs import one_line
from agentium_harness._observe.state import error_type
from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.plugin_api import OpContext, SessionKey, SessionStoreError

pytestmark = pytest.mark.anyio


class _Vouches(str):
    """Text that says it is printable, and is its own ``str()``."""

    __slots__ = ()

    def isprintable(self) -> bool:
        return True

    def __str__(self) -> str:
        return self


ODD = _Vouches("Gone\nCRITICAL agentium.engine forged \x1b[31mred")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_one_line_reads_a_str_subclass_as_plain_text() -> None:
    assert one_line(ODD) == "Gone\\x0aCRITICAL agentium.engine forged \\x1b[31mred"
    assert type(one_line(ODD)) is str


def test_error_type_escapes_a_class_name_given_as_a_str_subclass() -> None:
    named = type(ODD, (Exception,), {})
    assert error_type(named()) == "Gone\\x0aCRITICAL agentium.engine forged \\x1b[31mred"
    named.__qualname__ = ODD
    assert error_type(named()).isprintable()


async def test_a_memory_fence_warning_names_such_an_error_on_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from test_memory_fence_take_back import GENEROUS, SCOPE, Store

    odd_error = type(ODD, (SessionStoreError,), {})

    class Ledger(InMemorySessionStore):
        fail = False

        async def load(self, key: SessionKey, ctx: OpContext) -> object:
            if self.fail:
                raise odd_error("the session store went away")
            return await super().load(key, ctx)

    store, sessions = Store(), Ledger()
    manager = MemoryManager(store)
    fence_memory(manager, sessions, GENEROUS)

    async def fail_from_now() -> None:
        sessions.fail = True

    store.before_write = fail_from_now
    with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"):
        ack = await manager.remember(MemoryFact(SCOPE, "pin is 4321"))
    assert ack.status == "stored"
    [message] = [r.getMessage() for r in caplog.records if "not confirmed against erasures" in r.getMessage()]
    assert message.isprintable(), message
