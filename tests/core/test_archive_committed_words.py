"""What an archive (or any adapter) said never reaches committed history by way of a record the engine keeps.

A session's snapshot is rewritten by every save and its groups are archived:
what they hold is this tenant's history. An archive's error text may name
another tenant's rows (a shared backend's message), so the records the
engine commits about an archive's failure say it in the engine's words — the
error by its class, the session's own seqs — while the host still gets the
whole text in the run's diagnostics (never committed):

- an eviction the archive refused as a conflict (``ArchiveDivergence.detail``);
- a summary update that could not read a group (``CoverageGap.detail``);
- an adapter's sequence that could not be read (a ``ContractViolationError``
  quoting its exception) stopping a turn whose tools ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agentium_harness import VerifiedIdentity
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits
from agentium_harness._engine.results import EvictionStatus
from agentium_harness._engine.runtime import RuntimeLimits
from agentium_harness._errors import ArchiveConflictError, ArchiveCorruptError, ArchiveError
from agentium_harness._history import MessageGroup
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.summary import GapReason, SummaryLimits
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

pytestmark = pytest.mark.anyio

#: Another tenant's row, which the archive's error names.
FOREIGN = "row-globex-salaries-77"
ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _committed(sessions: InMemorySessionStore, archive: InMemoryArchive) -> bytes:
    """Every byte committed: the session's snapshot rows and the archived groups."""
    stored = [row for _, row in sessions._rows.values()]
    stored += [data for groups in archive._groups.values() for data, _ in groups.values()]
    assert stored, "nothing was committed"
    return b"".join(stored)


class ConflictingArchive(InMemoryArchive):
    """Refuses every eviction as a conflict, its message naming another tenant's row."""

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> list[ArchiveReceipt]:
        raise ArchiveConflictError(f"seq 0 is held by {FOREIGN} of tenant globex")


async def test_an_archive_conflict_is_recorded_in_the_engines_words_its_text_only_diagnosed() -> None:
    sessions, archive = InMemorySessionStore(), ConflictingArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=sessions,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    async with rt:
        await rt.run(ANA, "s1", "q0")
        result = await rt.run(ANA, "s1", "q1")
        view = await rt.inspect_session(ANA, "s1")
    assert result.eviction is EvictionStatus.DIVERGED
    (note,) = [d for d in result.diagnostics if d.code == "archive_diverged"]
    assert FOREIGN in note.message  # the host has the archive's words, never committed
    assert view.divergence is not None and view.divergence.seqs == (0,)
    assert view.divergence.detail.startswith("ArchiveConflictError"), view.divergence.detail
    assert FOREIGN.encode() not in _committed(sessions, archive) and b"globex" not in _committed(
        sessions, archive
    )


class UnreadableArchive(InMemoryArchive):
    """Reads fail while ``down`` is set, with ``error``: its message names another tenant's row."""

    down = False
    error: type[ArchiveError] = ArchiveError

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        if self.down:
            raise self.error(f"{FOREIGN} of tenant globex holds the lock")
        return await super().read_groups(key, start_seq, max_groups, ctx)


@pytest.mark.parametrize(
    ("error", "reason"),
    [(ArchiveError, GapReason.UNAVAILABLE), (ArchiveCorruptError, GapReason.CHANGED)],
    ids=["unavailable", "changed"],
)
async def test_a_summary_gap_names_the_archives_error_by_its_class_its_text_only_diagnosed(
    error: type[ArchiveError], reason: GapReason
) -> None:
    sessions, archive = InMemorySessionStore(), UnreadableArchive()
    archive.error = error
    rt = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=sessions,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    async with rt:
        for i in range(3):
            await rt.run(ANA, "s1", f"Fact {i}: the widget weighs {i} grams.")
        archive.down = True
        result = await rt.run(ANA, "s1", "Fact 3: one more.")
    assert result.summary is not None
    (gap,) = result.summary.gaps
    assert gap.reason is reason and FOREIGN not in gap.detail, gap.detail
    assert error.__name__ in gap.detail, gap.detail
    (note,) = [d for d in result.diagnostics if d.code == "summary_gap"]
    assert FOREIGN in note.message  # the host has the archive's words, never committed
    assert FOREIGN.encode() not in _committed(sessions, archive) and b"globex" not in _committed(
        sessions, archive
    )


class Unreadable(Sequence[object]):
    """A sequence whose iterator raises an error naming another tenant's row."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: Any) -> Any:
        raise IndexError(i)

    def __iter__(self) -> Any:
        raise RuntimeError(f"cursor over {FOREIGN} of tenant globex was closed")


def test_an_adapters_sequence_that_cannot_be_read_is_committed_by_its_errors_class() -> None:
    # The refusal quotes the adapter's exception for the host; a stop it causes after tools ran
    # commits it (retained.interruption.detail), where only the engine's words may go.
    from agentium_harness._engine.adapter_lists import listed
    from agentium_harness._engine.turn_commit import committed_text
    from agentium_harness._errors import ContractViolationError

    with pytest.raises(ContractViolationError) as caught:
        listed(Unreadable(), 4, "archive InMemoryArchive.append", "receipts")
    assert FOREIGN in str(caught.value)
    committed = committed_text(caught.value)
    assert FOREIGN not in committed and "globex" not in committed, committed
    assert committed.startswith("ContractViolationError: archive InMemoryArchive.append returned"), committed
    assert "(RuntimeError)" in committed, committed
