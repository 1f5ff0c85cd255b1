"""A join record (``j-<id>``) holding another erasure's header is damaged data, and said so.

The key names one erasure; a record there that decodes but names another
erasure (or holds no header, or several) was not written by this erasure's
join. It is read as absent — the fences then judge the erasure as one that
may have joined at any time — and, as a record that does not decode, a
WARNING names the erasure: never silently.
"""

from __future__ import annotations

import logging

import pytest

from agentium_harness import EraseTarget, ErasureState, OperatorAttestation, VerifiedIdentity
from agentium_harness._engine.erasure import new_record
from agentium_harness._engine.erasure_ledger import (
    header,
    joined_after,
    joined_key,
    joined_since,
    load_ledger,
    save_joined,
    save_ledger,
)
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._ports.erasure import ErasureKind, ErasureLedger, ErasureRecord
from agentium_harness.adapters.memory import InMemorySessionStore

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")


def _record(session: str) -> ErasureRecord:
    target = EraseTarget.session("acme", "ana", session)
    return new_record(target, "dsr", OPERATOR, ErasureKind.ERASURE, ErasureState.PENDING)


@pytest.mark.parametrize("held", ["other", "none", "two"])
async def test_a_join_record_not_of_its_erasure_is_absent_with_a_warning(
    held: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Erasure one's join key holds erasure two's header (or none, or two): ``None``, and a WARNING."""
    store, ticket = InMemorySessionStore(), Ticket(None, "test", 30.0)
    one, two = _record("s1"), _record("s2")
    await save_joined(ticket, store, one, 3)
    assert await joined_after(ticket, store, one) == 3  # its own: read as kept
    records = {"other": (header(two),), "none": (), "two": (header(one), header(two))}[held]
    key = joined_key("acme", one.erasure_id)
    revision, _ = await load_ledger(ticket, store, key)
    await save_ledger(ticket, store, key, ErasureLedger(records, joined_after=3), revision)
    caplog.set_level(logging.WARNING)
    assert await joined_after(ticket, store, one) is None
    assert await joined_since(ticket, store, one, 5) is None
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and one.erasure_id in r.getMessage()]
    assert warned and "join record" in warned[0].getMessage()


async def test_an_absent_join_record_is_none_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """An earlier version's erasure has no join record: ``None``, and nothing logged (it is no damage)."""
    store, ticket = InMemorySessionStore(), Ticket(None, "test", 30.0)
    caplog.set_level(logging.WARNING)
    assert await joined_after(ticket, store, _record("s1")) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
