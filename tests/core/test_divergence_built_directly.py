"""An ``ArchiveDivergence`` built directly takes exactly what a load takes: the stored bound.

The engine cuts the detail it records to ``MAX_DIVERGENCE_DETAIL_BYTES`` (16 KiB). The
constructor's bound is the stored one, ``MAX_STORED_DIVERGENCE_DETAIL_BYTES`` (256 KiB),
and must stay so: a decode builds the record through the constructor (an earlier version's
divergence, its archive's message kept whole, loads up to it), and the engine carries a
loaded divergence forward unchanged. No adapter or host in the project builds one; one that
does (a session store's migration tool, say) gets a record every load accepts, and one byte
more is refused where it is built, with nothing saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness import (
    InvalidArgumentError,
    SessionDivergedError,
    SessionKey,
    SessionState,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.snapshot import MAX_DIVERGENCE_DETAIL_BYTES, MAX_STORED_DIVERGENCE_DETAIL_BYTES
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import ArchiveDivergence, OpContext, seal_snapshot

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("acme", "alice", "test-auth")
KEY = SessionKey("acme", "alice", "s1")
#: The longest detail a load takes, longer than any the engine records.
LONGEST = "é" * (MAX_STORED_DIVERGENCE_DETAIL_BYTES // 2)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_divergence_built_directly_at_the_stored_bound_loads_and_is_kept(
    kind: str, tmp_path: Path
) -> None:
    assert len(LONGEST.encode("utf-8")) > MAX_DIVERGENCE_DETAIL_BYTES
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    store: Any = InMemorySessionStore() if kind == "memory" else SQLiteSessionStore(config)
    archive = InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        owned=[archive, store],
    )
    try:
        await rt.run(ALICE, "s1", "q0")
        loaded = await store.load(KEY, OpContext())
        divergence = ArchiveDivergence((1,), LONGEST)  # as a third party builds it
        diverged = seal_snapshot(attrs.evolve(loaded.snapshot, divergence=divergence, digest=None))
        await store.save(KEY, diverged, loaded.revision, OpContext())
        # Loaded back whole, by the store and by the runtime, which refuses runs on it as on any.
        again = await store.load(KEY, OpContext())
        assert again is not None and again.snapshot.divergence == divergence
        view = await rt.inspect_session(ALICE, "s1")
        assert view.state is SessionState.DIVERGED and view.divergence == divergence
        with pytest.raises(SessionDivergedError):
            await rt.run(ALICE, "s1", "q1")
        # One byte more is refused where it is built: no record of it exists to save.
        with pytest.raises(InvalidArgumentError, match="detail"):
            ArchiveDivergence((1,), LONGEST + "x")
        kept = await store.load(KEY, OpContext())
        assert kept is not None and kept.revision == again.revision and kept.snapshot == again.snapshot
    finally:
        await rt.aclose()
