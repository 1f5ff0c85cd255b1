"""A run that loaded a session just before another process erased it archives nothing of the old session.

Found by a probe of four processes over one S3 bucket and one Redis while a
fifth erased sessions: a slow run loaded session ``s0`` before the erasure's
record was written; the erasure completed while the model answered; the run's
commit then archived its evicted resident group (the erased session's text)
at the old seq, and only then did its compare-and-set save fail. The group
stayed in the archive, orphaned, and when the re-used session reached that
seq its own eviction met the stale group: the session became ``diverged``,
and reconciling would have adopted the erased text over the committed group.

Two runtimes over the same stores stand for the two processes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s0")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")


class Held(ScriptedProvider):
    """Answers at once, except the armed call, which waits for ``release`` after saying it started."""

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.armed = False
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if self.armed:
            self.armed = False
            self.started.set()
            await self.release.wait()
        return await super().complete(request, ctx)


def _runtime(provider: Any, archive: InMemoryArchive, store: InMemorySessionStore) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def _archived(archive: InMemoryArchive) -> list[str]:
    groups = await archive.read_groups(KEY, 0, 100, OpContext.with_timeout(5))
    return [repr(g) for g in groups]


@pytest.mark.parametrize("erasure", ["completed", "pending"])
async def test_a_run_loaded_before_an_erasure_archives_none_of_the_erased_session(erasure: str) -> None:
    archive, store = InMemoryArchive(), InMemorySessionStore()
    provider = Held()
    slow = _runtime(provider, archive, store)  # one process: its run is slow
    other = _runtime(ScriptedProvider(replies=["ok"], cycle=True), archive, store)  # another: the operator
    try:
        await slow.run(ANA, "s0", "first secret qzfirstsecretq")
        await slow.run(ANA, "s0", "second turn")
        assert await _archived(archive) == []  # both groups resident: the next commit evicts group 0

        provider.armed = True
        failures: list[BaseException] = []

        async def stale_run() -> None:
            try:
                await slow.run(ANA, "s0", "third turn")
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale_run)
            await provider.started.wait()  # the run loaded the session before the erasure's record
            if erasure == "completed":
                result = await other.erase(
                    EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
                )
                assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
                expected: type[Exception] = SessionConflictError
            else:
                # An erasure whose record is written but which has not erased anything yet (its first
                # store call fails): pending, the scope fenced.
                await _pending_erasure(other, archive)
                expected = ErasureInProgressError
            provider.release.set()

        (failure,) = failures
        assert isinstance(failure, expected), failure
        assert getattr(failure, "commit_state", None) is not None
        assert str(failure.commit_state) in ("not_committed", "CommitState.NOT_COMMITTED")
        # The old session's group 0 (its text) was never written back to the archive.
        assert not [g for g in await _archived(archive) if "qzfirstsecretq" in g]
        if erasure == "completed":
            # The erased session id is used again from seq 0, and its groups archive at their seqs.
            for i in range(4):
                done = await other.run(ANA, "s0", f"new turn {i}")
                assert done.committed
            assert [r for r in await _archived(archive) if "qzfirstsecretq" in r] == []
            groups = await archive.read_groups(KEY, 0, 100, OpContext.with_timeout(5))
            assert [g.seq for g in groups] == [0, 1]
            assert "new turn 0" in repr(groups[0])
    finally:
        await slow.aclose()
        await other.aclose()


async def _pending_erasure(runtime: Any, archive: InMemoryArchive) -> None:
    """Leave an erasure of the session pending: the archive's first erase call fails."""
    real = archive.erase

    async def failing(*args: object, **kwargs: object) -> Any:
        raise OSError("archive unreachable")

    archive.erase = failing  # type: ignore[method-assign]
    try:
        with pytest.raises(ErasureIncompleteError):
            await runtime.erase(EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR)
    finally:
        archive.erase = real  # type: ignore[method-assign]
