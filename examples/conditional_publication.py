"""Conditional publication: commit a run only while the sources it used are still current.

The runtime validates recalled sources before the model call and again
before the session commit. A document can still change in the instant
between that second check and the commit. A host that needs the answer and
its evidence published atomically passes ``publication=`` to
``create_harness_runtime``: the engine hands it the run's view (scope, source
refs and their revisions) and a ``commit`` callable, and the host commits
under its own condition. Here the condition is "no writer holds the document
lock and every revision is unchanged", checked while holding that lock.

Run it: ``python examples/conditional_publication.py``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from agentium_harness import (
    OpContext,
    PublicationRefusedError,
    RecallLimits,
    RecallView,
    SourceOwner,
    ValidationStatus,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore


class LockedPublication:
    """Commits only under the lock the host's document writers also take, after re-checking revisions."""

    def __init__(self, store: SQLiteRecallStore, lock: anyio.Lock) -> None:
        self.store = store
        self.lock = lock
        self.refused = 0

    async def publish(self, view: RecallView, commit: Callable[[], Awaitable[None]]) -> None:
        async with self.lock:  # no document can change while we check and commit
            session = await self.store.open(view.scope, RecallLimits(), OpContext.with_timeout(2.0))
            try:
                checked = await session.validate_current(list(view.refs), OpContext.with_timeout(2.0))
            finally:
                await session.close()
            stale = [v.ref.source_id for v in checked if v.status is not ValidationStatus.CURRENT]
            if stale:
                self.refused += 1
                raise PublicationRefusedError(f"sources changed before publication: {stale}")
            await commit()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(Path(tmp) / "recall.db")))
        owner = SourceOwner("acme")  # a tenant-wide document
        ctx = OpContext.with_timeout(5.0)
        await recall.index_document(owner, "runbook", "Deploys run on Tuesdays after the freeze.", ctx)
        lock = anyio.Lock()
        publication = LockedPublication(recall, lock)
        sessions = InMemorySessionStore()
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=sessions,
            recall=recall,
            publication=publication,
        )
        ana = VerifiedIdentity(tenant="acme", user="ana", verified_by="example-sso")
        result = await runtime.run(ana, "s1", "When do deploys run?")
        print("published:", result.committed, result.output)
        assert result.committed and "Tuesdays" in result.output
        assert result.retained.source_view_revision == result.recall.source_view_revision  # type: ignore[union-attr]

        # A writer changes the runbook between the commit fence and publication:
        # simulated by editing it from inside the publication hook's window.
        class EditThenPublish(LockedPublication):
            async def publish(self, view: RecallView, commit: Callable[[], Awaitable[None]]) -> None:
                await recall.index_document(owner, "runbook", "Deploys run on Thursdays now.", ctx)
                await super().publish(view, commit)

        runtime.publication = EditThenPublish(recall, lock)
        before = await sessions.load(result.retained.scope.session_key, OpContext.with_timeout(2.0))
        try:
            await runtime.run(ana, "s1", "When do deploys run?")
        except PublicationRefusedError as exc:
            print("refused:", exc)
        else:
            raise AssertionError("a stale view must not be published")
        after = await sessions.load(result.retained.scope.session_key, OpContext.with_timeout(2.0))
        assert (
            before is not None and after is not None and after.revision == before.revision
        )  # nothing committed
        await recall.aclose()


if __name__ == "__main__":
    anyio.run(main)
