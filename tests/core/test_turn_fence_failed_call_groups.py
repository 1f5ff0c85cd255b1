"""Retention begun during a model call that fails (or is cancelled): the WARNING says the commit was refused.

After a failed or cancelled model call, the run fences' last look is made before
what ran is kept (tests/core/test_turn_fence_failed_last_call.py). When that look
finds an erasure of archived groups of the session under way (retention, a
forgotten fact's sources), the commit of what ran is refused — truthfully, in the
error raised — yet the WARNING logged said the look "could not be checked again"
and that what ran was "kept as usual". Now the WARNING says that what ran was not
committed: an erasure of archived groups of the session began during that call.
No content and no id in it (the session's, the erasure's, the fact's).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, HookedArchive
from _fence_support import closing, fence_pair
from test_turn_fence_failed_last_call import FailsHeldCall
from test_turn_fence_last_call import FACT, SCOPE, HeldCall, _resident, _run_while_held

from agentium_harness import (
    CommitState,
    EraseTarget,
    MemoryFact,
    ProviderError,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
)
from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio

DEPLOY = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}
#: The turns before the one under test: two archived groups, one past the retention policy.
EARLIER = ("turn 0", "turn 1", "turn 2")


class HeldErase:
    """What the hooked archive awaits before a real erase: ``entered``, then ``release``."""

    def __init__(self) -> None:
        self.entered, self.release = anyio.Event(), anyio.Event()

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if not kwargs.get("dry_run", False):
            self.entered.set()
            with anyio.fail_after(30):
                await self.release.wait()


def _pair(provider: Any, erase: HeldErase) -> tuple[Any, Any]:
    """Ana's runtime (one group resident, a memory fact carried) and another process's, which retains."""
    held = HeldTool()
    held.release.set()
    shared = {"archive": HookedArchive(erase), "session_store": InMemorySessionStore()}
    memory = InMemoryMemoryStore()
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1))
    mine = {**shared, "memory": memory, "limits": limits}
    other = {
        **shared,
        "memory": memory,
        "limits": limits,
        "retention": RetentionPolicy(max_archived_groups=1),
    }
    return fence_pair(provider, held, mine, other)


def _said_refused(caplog: pytest.LogCaptureFixture, ids: tuple[str, ...]) -> None:
    """One WARNING says the groups erasure refused the commit; none says it was kept; no content, no id."""
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not [m for m in messages if "could not be checked again" in m or "kept as usual" in m], messages
    said = [
        r
        for r in caplog.records
        if "before its failed model call" in r.getMessage() and "refused" in r.getMessage()
    ]
    assert len(said) == 1, messages
    (record,) = said
    assert record.levelno == logging.WARNING and record.name == "agentium.engine"
    message = record.getMessage()
    assert "not committed" in message and "erasure of archived groups" in message, message
    assert "qz" not in message and "s1" not in message, message  # no content, no session id
    assert not [i for i in ids if i and i in message], message  # no erasure or fact id


async def test_retention_begun_during_a_failed_call_is_said_to_refuse_what_ran(
    caplog: pytest.LogCaptureFixture,
) -> None:
    erase = HeldErase()
    provider = FailsHeldCall([*(["noted"] * len(EARLIER)), DEPLOY, "Done."], hold=len(EARLIER) + 2)
    retained: list[Any] = []
    async with closing(_pair(provider, erase)) as (mine, other):
        for text in EARLIER:
            await mine.run(ANA, "s1", text)
        ack = await mine.memory.remember(MemoryFact(SCOPE, FACT))
        async with anyio.create_task_group() as tg:

            async def retain() -> None:
                target = EraseTarget.session("acme", "ana", "s1")
                retained.append(await other.apply_retention(OPERATOR, target))

            async def meanwhile() -> None:
                tg.start_soon(retain)
                with anyio.fail_after(30):
                    await erase.entered.wait()  # recorded in the ledger, under way

            with caplog.at_level(logging.WARNING, logger="agentium"):
                outcome = await _run_while_held(
                    mine, provider, "What is the code?", meanwhile, grants=["deploy"]
                )
            erase.release.set()
        assert FACT in provider.sent[-1]  # the premise: the failed call carried the fact (a look follows)
        assert isinstance(outcome, ProviderError), repr(outcome)
        assert outcome.commit_state is CommitState.NOT_COMMITTED  # the error says it truthfully
        assert "could not be committed" in str(outcome)
        assert await _resident(mine) == 1  # "turn 2" only: the tool round was not kept
    (erasure,) = retained[0].erasures
    _said_refused(caplog, (erasure.record.erasure_id, ack.fact_id))


async def test_retention_begun_during_a_cancelled_call_is_said_to_refuse_what_ran(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cancelled call is a failed one: the same look (``LOOK_SHARE``), the same WARNING."""
    erase = HeldErase()
    provider = HeldCall([*(["noted"] * len(EARLIER)), DEPLOY, "Done."], hold=len(EARLIER) + 2)
    async with closing(_pair(provider, erase)) as (mine, other):
        for text in EARLIER:
            await mine.run(ANA, "s1", text)
        ack = await mine.memory.remember(MemoryFact(SCOPE, FACT))
        cancel, ran = anyio.CancelScope(), anyio.Event()

        async def run() -> None:
            try:
                with cancel:
                    await mine.run(ANA, "s1", "What is the code?", grants=["deploy"])
            finally:
                ran.set()

        retained: list[Any] = []

        async def retain() -> None:
            target = EraseTarget.session("acme", "ana", "s1")
            retained.append(await other.apply_retention(OPERATOR, target))

        with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await provider.started.wait()
                tg.start_soon(retain)
                await erase.entered.wait()  # recorded in the ledger, under way
                cancel.cancel()
                await ran.wait()  # the look, then the commit of what ran, before the cancellation goes on
                erase.release.set()
        assert cancel.cancelled_caught
        assert FACT in provider.sent[-1]
        assert await _resident(mine) == 1  # "turn 2" only
    (erasure,) = retained[0].erasures
    _said_refused(caplog, (erasure.record.erasure_id, ack.fact_id))
