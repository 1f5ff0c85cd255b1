"""Reading recalled groups back for their roles reads a bounded number of bytes from the archive.

Recall renders each recalled group's excerpt from the group itself, read
back from the archive (:mod:`agentium_harness._engine.recall_groups`). A
group may be large (up to 32 MiB) while its excerpt is a few hundred bytes,
so the read-back has a byte budget of its own (``max_readback_bytes``):
past it no archive read starts, and each read asks for one group, so at
most one group more is read. The excerpts it leaves unread are shown as an
excerpt whose group cannot be read back is: on one line, roles unchecked,
said in a note, a WARNING and a span event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from _recall_support import Recording
from _telemetry_support import Telemetered

from agentium_harness import RecallStatus, RunStatus, SessionKey, VerifiedIdentity, create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._engine.recall_groups import UNATTRIBUTED
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.recall import RecallLimits
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
GROUPS = 8


class CountingArchive(InMemoryArchive):
    """A real in-memory archive that counts the parcel groups its reads return, once ``counting`` is set."""

    counting = False

    def __init__(self) -> None:
        super().__init__()
        self.read_bytes = 0
        self.read_seqs: list[int] = []

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        # The parcel groups only: the run's commit reads back the chatter group it indexes (seq 8).
        parcels = [g for g in groups if g.seq < GROUPS]
        if self.counting:
            self.read_bytes += sum(g.size_bytes for g in parcels)
            self.read_seqs.extend(g.seq for g in parcels)
        return groups

    def groups_bytes(self) -> dict[int, int]:
        """The size of each archived group of session s1, as stored (its canonical bytes)."""
        found = ((seq, self.raw(KEY, seq)) for seq in range(GROUPS + 2))
        return {seq: len(row[0]) for seq, row in found if row is not None}


def _text(i: int, size: int) -> str:
    # The words the query asks for first, then filler: each group is ``size`` bytes or so of text.
    head = f"Parcel {i} shipped to warehouse aurora with tracking code TRK-{i:04d}."
    filler = "padding " * (size // 8)
    return f"{head}\n{filler}"


async def _run(
    recall: Any, archive: CountingArchive, size: int, limits: RecallLimits, telemetry: Any = None
) -> tuple[Any, Recording]:
    provider = Recording()
    extra = {} if telemetry is None else {"telemetry": telemetry}
    runtime = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=InMemorySessionStore(),
        recall=recall,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1), source_tokens=16_384),
        recall_limits=limits,
        **extra,
    )
    try:
        with anyio.fail_after(30):
            for i in range(GROUPS):
                await runtime.run(ANA, "s1", _text(i, size))
            await runtime.run(ANA, "s1", "Unrelated chatter.")  # every parcel group is archived now
            archive.counting = True
            result = await runtime.run(ANA, "s1", "Which parcel shipped to warehouse aurora?")
    finally:
        await runtime.aclose()
    return result, provider


def _blocks(provider: Recording) -> dict[str, str]:
    return {b.source_id: b.content for b in provider.requests[-1].sources if b.source_id.startswith("group/")}


# Room for every excerpt: only the read-back's bytes are in question.
ROOMY = {"max_excerpt_bytes": 256, "max_evidence_tokens": 16_384, "max_latency_s": 30.0}


async def test_the_default_budget_bounds_what_eight_large_groups_read_back() -> None:
    """Eight groups of about 300 KB each, all recalled: the read-back stops at its default budget.

    Before the budget, all eight were read back (about 2.4 MB) to show a
    few hundred bytes of each, bounded only by the latency budget and the
    number of sources (with 4 MiB groups, 33.5 MB).
    """
    archive = CountingArchive()
    budget = 1_048_576  # the documented default (the last test checks RecallLimits says so)
    result, provider = await _run(InMemoryRecallStore(), archive, 300_000, RecallLimits(**ROOMY))
    assert result.status is RunStatus.COMPLETED
    blocks = _blocks(provider)
    assert len(blocks) == GROUPS
    sizes = archive.groups_bytes()
    # No read starts past the budget, and each asks for one group: one group past it at most.
    assert archive.read_bytes <= budget + max(sizes.values())
    assert archive.read_bytes - sizes[archive.read_seqs[-1]] < budget
    assert len(archive.read_seqs) == 4  # four groups of ~300 KB reach the 1 MiB default
    # What was read is rendered line by line; the rest is shown on one line, roles unchecked.
    for source_id, content in blocks.items():
        seq = int(source_id.rsplit("/", 1)[1])
        assert content.startswith("user: " if seq in archive.read_seqs else UNATTRIBUTED), source_id
    assert result.recall is not None and result.recall.usage.readback_bytes == archive.read_bytes
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert any("4 recalled group(s) were not read back" in n and "max_readback_bytes" in n for n in notes)
    assert result.recall.status is RecallStatus.COMPLETE


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_explicit_budget_reads_groups_in_rank_order_until_it_is_spent(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    recall: Any = (
        SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
        if kind == "sqlite"
        else InMemoryRecallStore()
    )
    archive = CountingArchive()
    t = Telemetered()
    caplog.set_level(logging.WARNING, "agentium.engine.recall")
    try:
        result, provider = await _run(
            recall, archive, 20_000, RecallLimits(max_readback_bytes=50_000, **ROOMY), t.telemetry()
        )
    finally:
        await recall.aclose()
    sizes = archive.groups_bytes()
    # Read one at a time until what was read reaches 50,000 bytes: three groups of ~20 KB.
    assert archive.read_bytes == sum(sizes[s] for s in archive.read_seqs)
    assert len(archive.read_seqs) == 3 and archive.read_bytes - sizes[archive.read_seqs[-1]] < 50_000
    assert result.recall is not None and result.recall.usage.readback_bytes == archive.read_bytes
    blocks = provider.requests[-1].sources
    ranked = [b for b in blocks if b.source_id.startswith("group/")]
    assert len(ranked) == GROUPS
    seqs = [int(b.source_id.rsplit("/", 1)[1]) for b in ranked]
    # In rank order: the best-ranked groups are the ones read back and rendered with their roles.
    assert archive.read_seqs == seqs[:3]
    for block in ranked[:3]:
        assert block.content.startswith("user: Parcel ")
    for block in ranked[3:]:
        assert block.content.startswith(UNATTRIBUTED + "user: Parcel ")
        assert "\n" not in block.content
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        "5 recalled group(s) shown without roles: not read back, past the read-back byte budget" in warnings
    ), warnings
    # One span event per round that hit the budget (the earlier runs recalled earlier parcels): it
    # says why, never what: no content, no ids.
    over = [w for w in warnings if "past the read-back byte budget" in w]
    event = (
        f"retrieval {type(recall).__name__}",
        "agentium.recall.group_unchecked",
        {"error.type": "byte_budget"},
    )
    assert t.events("agentium.recall.group_unchecked") == [event] * len(over)
    assert "Parcel" not in " ".join(warnings)


def test_the_budget_is_a_recall_limit_with_a_default_and_bounds() -> None:
    assert RecallLimits().max_readback_bytes == 1_048_576
    with pytest.raises(Exception, match="max_readback_bytes"):
        RecallLimits(max_readback_bytes=0)


_MISFILED = 1_000


class TamperingArchive(CountingArchive):
    """A real in-memory archive whose read of one parcel group returns another, larger group in its place.

    What the read returned (counted as :class:`CountingArchive` counts)
    includes the bytes of the group the engine refuses.
    """

    tampered = -1

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        groups = list(await InMemoryArchive.read_groups(self, key, start_seq, max_groups, ctx))
        if self.counting:
            if self.tampered < 0:
                self.tampered = groups[0].seq  # the first group recall reads back: the top-ranked one
            # At another seq than asked (a misfiled row): the engine's check refuses it.
            groups = [
                MessageGroup(g.seq + _MISFILED, (*g.messages, Message(Role.ASSISTANT, "x" * 30_000)))
                if g.seq == self.tampered
                else g
                for g in groups
            ]
            parcels = [g for g in groups if g.seq < GROUPS or g.seq >= _MISFILED]
            self.read_bytes += sum(g.size_bytes for g in parcels)
            self.read_seqs.extend(g.seq for g in parcels)
        return groups


async def test_the_bytes_of_a_group_that_fails_its_check_count_as_read_back() -> None:
    """``readback_bytes`` says what the archive's reads returned, a group its digest check refused included.

    The top-ranked group comes back at another seq, with 30 KB more (about
    50 KB): the check refuses it and no read starts after it, but its bytes
    were read: the usage says so, and they count against the run's budget.
    """
    archive = TamperingArchive()
    result, _ = await _run(InMemoryRecallStore(), archive, 20_000, RecallLimits(**ROOMY))
    # One read, refused: nothing is read after it.
    assert archive.read_seqs == [archive.tampered + _MISFILED]
    assert archive.read_bytes > 40_000
    assert result.recall is not None and result.recall.usage.readback_bytes == archive.read_bytes
