"""The provenance tests of the memory store suite: what a duplicate ``remember`` keeps.

:class:`MemoryProvenanceTests` is part of
:class:`~agentium_harness.testing.MemoryStoreContract`. A session erasure
removes the facts whose provenance names the session (docs/erasure.md), so a
store that drops the groups a duplicate ``remember`` cites leaves, after such
an erasure, a fact the erased session also produced.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from .._errors_memory import MemoryRejectedError
from .._ports import OpContext
from .._ports.erasure import EraseTarget
from .._ports.memory import (
    MAX_PROVENANCE,
    AckStatus,
    FactStatus,
    GroupRef,
    MemoryCapabilities,
    MemoryFact,
    MemoryScope,
    MemoryStore,
)
from ._suite import declared_capabilities

__all__ = ["MemoryProvenanceTests"]

_ANA = MemoryScope("tenant-p", "ana")


def _ctx() -> OpContext:
    return OpContext.with_timeout(10.0)


def _ref(session: str, seq: int = 0) -> GroupRef:
    return GroupRef(session, seq, "sha256:" + f"{seq:064x}")


class MemoryProvenanceTests:
    """What a duplicate ``remember`` does with its provenance; part of :class:`MemoryStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    async def test_a_duplicate_remember_keeps_the_groups_it_adds(self, memory_store: MemoryStore) -> None:
        """A duplicate citing new groups is the fact's next revision citing them; past the bound, refused.

        The same text and validity again, citing a group the current revision
        does not, answers ``STORED`` with the same fact id and the next
        revision, whose provenance is the current one's followed by the new
        groups (``merged_provenance``); citing nothing new answers
        ``DUPLICATE`` and writes nothing. A duplicate that would make the
        fact cite more than ``MAX_PROVENANCE`` groups raises
        ``MemoryRejectedError`` and writes nothing. With ``history`` the
        earlier revision is kept, superseded; with ``correction``, a
        correction to the same text and validity is such a duplicate too;
        with ``erasure``, erasing the session only the duplicate named
        removes the fact. A failure means the store drops a duplicate's
        provenance, so a session erasure leaves a fact that session produced.
        """
        text = "Ana deploys on Tuesdays"
        first = await memory_store.remember(MemoryFact(_ANA, text, provenance=[_ref("s1")]), _ctx())
        again = await memory_store.remember(
            MemoryFact(_ANA, text, provenance=[_ref("s2", 1), _ref("s1")]), _ctx()
        )
        assert (again.status, again.fact_id, again.revision) == (AckStatus.STORED, first.fact_id, 2), (
            f"a duplicate citing a new group answered {again}: its provenance was not kept"
        )
        [current] = await memory_store.lookup(_ANA, "deploys", 10, _ctx())
        assert (current.fact_id, current.revision, current.text) == (first.fact_id, 2, text)
        assert current.fact.provenance == (_ref("s1"), _ref("s2", 1))
        same = await memory_store.remember(MemoryFact(_ANA, text, provenance=[_ref("s2", 1)]), _ctx())
        assert (same.status, same.revision) == (AckStatus.DUPLICATE, 2)
        caps = declared_capabilities(memory_store, MemoryCapabilities, "memory store")
        if caps.history and first.fact_id is not None:
            revisions = await memory_store.history(_ANA, first.fact_id, _ctx())
            assert [(r.revision, r.status, r.fact.provenance) for r in revisions] == [
                (1, FactStatus.SUPERSEDED, (_ref("s1"),)),
                (2, FactStatus.CURRENT, (_ref("s1"), _ref("s2", 1))),
            ]
        if caps.correction and first.fact_id is not None:
            same_text = MemoryFact(_ANA, text, provenance=[_ref("s5", 2)])
            fixed = await memory_store.correct(_ANA, first.fact_id, same_text, _ctx())
            assert (fixed.status, fixed.revision) == (AckStatus.STORED, 3), (
                f"a same-text correction citing a new group answered {fixed}: its provenance was not kept"
            )
            [current] = await memory_store.lookup(_ANA, "deploys", 10, _ctx())
            assert current.fact.provenance == (_ref("s1"), _ref("s2", 1), _ref("s5", 2))
        full = MemoryFact(_ANA, "Ana's desk is 4B", provenance=[_ref("s3", n) for n in range(MAX_PROVENANCE)])
        kept = await memory_store.remember(full, _ctx())
        with pytest.raises(MemoryRejectedError):
            await memory_store.remember(MemoryFact(_ANA, full.text, provenance=[_ref("s4")]), _ctx())
            pytest.fail(f"a duplicate making the fact cite more than {MAX_PROVENANCE} groups was accepted")
        [desk] = [f for f in await memory_store.lookup(_ANA, "", 10, _ctx()) if f.text == full.text]
        assert (desk.fact_id, desk.revision, desk.fact.provenance) == (kept.fact_id, 1, full.provenance)
        if caps.erasure:
            await memory_store.erase(EraseTarget.session("tenant-p", "ana", "s2"), _ctx())
            left = await memory_store.lookup(_ANA, "", 10, _ctx())
            assert [f.fact_id for f in left] == [kept.fact_id], "erasing s2 left the fact it also produced"
