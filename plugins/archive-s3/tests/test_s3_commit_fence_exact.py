"""The commit fence's exact erasure rule on S3: each erasure's join record against the turn's load.

A new session's first turn finds it absent at its load and again before it
commits; only the tenant's finished erasures can say whether one of the
session ran meanwhile. Each keeps the revision of the tenant's ``pending``
ledger it joined after (its join record): the S3 store's revisions (one
past the store-wide floor for a new object, moved past it when an erase
raised it meanwhile; the one after the expected revision on a conditional
replace) only rise for the ledger, so an erasure of the session finished
before the turn loaded it does not refuse the commit while another erasure
of the tenant runs, and one that joined during the turn does. Two runtimes
over the same bucket and prefix stand for two processes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness import (
    EraseTarget,
    OperatorAttestation,
    SessionConflictError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    ERASURE_RECORDS_TENANT,
    OpContext,
    SessionKey,
)
from agentium_harness.testing.erasure_races import HeldProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
TURN = "a new session's first turn"


_Held = HeldProvider


def _runtime(provider: Any, config: S3Config) -> Any:
    archive, store = S3Archive(config), S3SessionStore(config)
    return create_harness_runtime(
        provider=provider, archive=archive, session_store=store, owned=(archive, store)
    )


async def _turn_while(slow: Any, provider: _Held, meanwhile: Any) -> BaseException | None:
    caught: list[BaseException] = []
    provider.armed = True

    async def turn() -> None:
        try:
            await slow.run(ANA, "s1", TURN)
        except Exception as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(30):
            await provider.started.wait()
        await meanwhile()
        provider.release.set()
    return caught[0] if caught else None


async def _texts(runtime: Any) -> list[str]:
    page = await runtime.read_history(ANA, "s1", max_groups=100, view=False)
    return [m.content for g in page.groups for m in g.messages]


@pytest.mark.parametrize("during", ["bob", "ana"])
async def test_an_s3_first_turn_after_an_old_erasure_is_judged_by_the_join_records(
    during: str, config: S3Config
) -> None:
    provider = _Held()
    slow = _runtime(provider, config)
    other = _runtime(ScriptedProvider(replies=["ok"], cycle=True), config)
    erased: list[Any] = []
    try:
        await slow.run(ANA, "s1", "before the erasure")
        await other.run(BOB, "b1", "bob's session")
        old = await other.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
        joined = await other.session_store.load(
            SessionKey(ERASURE_RECORDS_TENANT, "acme", f"j-{old.record.erasure_id}"), OpContext()
        )
        assert joined is not None and joined.snapshot.ledger.joined_after is not None
        target = (
            EraseTarget.user("acme", "bob") if during == "bob" else EraseTarget.session("acme", "ana", "s1")
        )

        async def meanwhile() -> None:
            erased.append(await other.erase(target, reason="dsr", attestation=OPERATOR))

        error = await _turn_while(slow, provider, meanwhile)
        if during == "bob":
            assert error is None, error  # ana's erasure joined before the turn's load
            assert await _texts(slow) == [TURN, "noted"]
        else:
            assert isinstance(error, SessionConflictError), error  # joined during the turn
            assert erased[0].record.erasure_id in str(error)
            assert await _texts(slow) == []
    finally:
        await slow.aclose()
        await other.aclose()
