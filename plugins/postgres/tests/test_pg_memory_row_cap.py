"""A memory fact whose stored provenance would pass ``max_row_bytes`` is refused when written.

Reads refuse a provenance longer than ``max_row_bytes`` (as a row changed
behind the store's back), before it is transferred. ``max_row_bytes`` may
be as small as 1 KiB, and a fact may cite 32 groups of 256-character
sessions: ``remember`` and ``correct`` stored such a fact, and every read
of it then failed (the fact could be neither listed, corrected nor
forgotten: only erasing its user removed it); a ``forget`` likewise wrote a
tombstone naming more sessions than a read takes. Each is refused before
anything is written (typed), and the fact stays as it was.
"""

from __future__ import annotations

import attrs
import pytest

from agentium_harness import MemoryRejectedError
from agentium_harness.plugin_api import GroupRef, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryError, PostgresMemoryStore

pytestmark = pytest.mark.anyio

BOB = MemoryScope("globex", "bob")
DIGEST = "sha256:" + "2" * 64
#: 32 references of 100-character sessions: about 5.8 KiB of provenance (8 of them: 1.5 KiB).
WIDE = [GroupRef(f"session-{i:02d}-" + "x" * 89, i, DIGEST) for i in range(32)]


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def test_a_provenance_over_max_row_bytes_is_refused_when_written(app_config: PostgresConfig) -> None:
    store = PostgresMemoryStore(attrs.evolve(app_config, max_row_bytes=2048))
    try:
        with pytest.raises(MemoryRejectedError, match="max_row_bytes"):
            await store.remember(MemoryFact(BOB, "cites many groups", provenance=WIDE), _ctx())
        assert await store.list_facts(BOB, 10, _ctx()) == []
        ack = await store.remember(MemoryFact(BOB, "cites a few", provenance=WIDE[:8]), _ctx())
        with pytest.raises(MemoryRejectedError, match="max_row_bytes"):
            await store.correct(BOB, ack.fact_id, MemoryFact(BOB, "now many", provenance=WIDE), _ctx())
        (kept,) = await store.list_facts(BOB, 10, _ctx())
        assert (kept.revision, kept.text) == (1, "cites a few")
        # Each revision within the bound, their tombstone (every session they cite) past it.
        ack2 = await store.correct(BOB, ack.fact_id, MemoryFact(BOB, "others", provenance=WIDE[8:16]), _ctx())
        await store.correct(BOB, ack.fact_id, MemoryFact(BOB, "more", provenance=WIDE[16:24]), _ctx())
        await store.correct(BOB, ack.fact_id, MemoryFact(BOB, "most", provenance=WIDE[24:]), _ctx())
        with pytest.raises(PostgresMemoryError, match="max_row_bytes"):
            await store.forget(BOB, ack.fact_id, _ctx())
        history = await store.history(BOB, ack2.fact_id, _ctx())
        assert [r.text for r in history] == ["cites a few", "others", "more", "most"]
    finally:
        await store.aclose()
