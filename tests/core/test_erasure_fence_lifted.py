"""The tombstone's last step, taking the erasure out of ``pending``, failing: the caller is told the truth.

The tombstone is saved and indexed first; then the erasure leaves the
tenant's ``pending`` ledger (the fence goes). When that removal raises, its
write may still have landed (a reply lost on the way back). The call reads
``pending`` back: out of it, the erasure is complete and the call returns
its tombstone; still in it, the erasure stays pending and the error says
so; when the read-back fails too, the error says the outcome is not known
— never "it stays pending" of an erasure that may be complete.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    OperatorAttestation,
    SessionState,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_tombstone
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 7")
S1 = EraseTarget.session("acme", "ana", "s1")
SECRET = "the secret plan"


def _landed_then_raises(real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def removal(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)
        raise OSError(f"reply lost near {SECRET}")

    return removal


async def _raises(*args: Any, **kwargs: Any) -> Any:
    raise OSError(f"store unreachable near {SECRET}")


async def _runtime() -> Any:
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    await rt.run(ANA, "s1", f"remember {SECRET}")
    return rt


async def test_a_removal_from_pending_that_landed_then_raised_returns_the_tombstone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = await _runtime()
    monkeypatch.setattr(
        erasure_tombstone, "update_ledger", _landed_then_raises(erasure_tombstone.update_ledger)
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        result = await rt.erase(S1, reason="user asked", attestation=OPERATOR)
    monkeypatch.undo()
    # Complete indeed: the fence is down, the session gone, and the status has nothing pending.
    assert result.record.state is ErasureState.COMPLETE and result.tombstone is not None
    [status] = await rt.erasure_status(OPERATOR)
    assert status.state is ErasureState.COMPLETE and status.erasure_id == result.record.erasure_id
    assert not (await rt.inspect_session(ANA, "s1")).exists
    assert "stays pending" not in caplog.text and SECRET not in caplog.text


async def test_a_removal_that_did_not_land_leaves_it_pending_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt = await _runtime()
    monkeypatch.setattr(erasure_tombstone, "update_ledger", _raises)
    with pytest.raises(ErasureIncompleteError) as caught:
        await rt.erase(S1, reason="user asked", attestation=OPERATOR)
    monkeypatch.undo()
    assert "stays pending" in str(caught.value) and caught.value.record is not None
    # True: its scope is still refused (its tombstone saved and indexed), and a resume lifts the fence.
    assert (await rt.inspect_session(ANA, "s1")).state is SessionState.ERASING
    # erasure_status says so too: pending (its saved tombstone read "complete" while the fence stood).
    [status] = await rt.erasure_status(OPERATOR)
    assert status.state is ErasureState.PENDING and status.erasure_id == caught.value.record.erasure_id
    assert any("has not left the pending erasures" in note for note in status.notes)
    [resumed] = await rt.resume_erasures(OPERATOR)
    assert resumed.record.state is ErasureState.COMPLETE
    assert resumed.record.erasure_id == caught.value.record.erasure_id
    assert not (await rt.inspect_session(ANA, "s1")).exists
    assert await rt.resume_erasures(OPERATOR) == ()
    [status] = await rt.erasure_status(OPERATOR)
    assert status.state is ErasureState.COMPLETE and status.erasure_id == resumed.record.erasure_id


async def test_a_removal_whose_outcome_cannot_be_read_back_says_it_is_not_known(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = await _runtime()
    monkeypatch.setattr(
        erasure_tombstone, "update_ledger", _landed_then_raises(erasure_tombstone.update_ledger)
    )
    monkeypatch.setattr(erasure_tombstone, "pending_records", _raises)
    with caplog.at_level(logging.DEBUG, logger="agentium"), pytest.raises(ErasureIncompleteError) as caught:
        await rt.erase(S1, reason="user asked", attestation=OPERATOR)
    monkeypatch.undo()
    error = caught.value
    message = str(error)
    assert "not known" in message and "stays pending" not in message
    assert "erasure_status" in message
    # The record it carries is the tombstone as saved: complete (it landed, as did the removal).
    assert error.record is not None and error.record.state is ErasureState.COMPLETE
    [status] = await rt.erasure_status(OPERATOR)
    assert status.state is ErasureState.COMPLETE and status.erasure_id == error.record.erasure_id
    assert "stays pending" not in caplog.text and "not known" in caplog.text
    assert SECRET not in caplog.text
