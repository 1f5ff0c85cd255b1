"""Task summaries and erasure: nothing the runtime keeps of an erased session's summary outlives it.

The snapshot (and its summary) goes with the session; so must the report of
its last background summary update, which ``settle_summary`` hands out with
the summary state it saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RuntimeCloseError,
    RuntimeLimits,
    SessionKey,
    SourcePlace,
    SourceState,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erased_groups import _summary_after
from agentium_harness._ports.erasure import SeqRange
from agentium_harness._ports.summary import Citation, SummaryState
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext, TaskSummary
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 7")
SECRET = "zephyrcode4471"


def _runtime(summarizer: Any = None) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=summarizer or ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )


async def _talk(rt: Any, who: VerifiedIdentity, session: str) -> None:
    for i in range(3):
        await rt.run(who, session, f"The vault code {i} is {SECRET}{i}.")


@pytest.mark.parametrize(
    "target",
    [
        EraseTarget.session("acme", "ana", "s1"),
        EraseTarget.user("acme", "ana"),
        EraseTarget.tenant("acme"),
    ],
    ids=["session", "user", "tenant"],
)
async def test_settle_summary_hands_out_nothing_of_an_erased_session(target: EraseTarget) -> None:
    rt = _runtime()
    async with rt:
        await _talk(rt, ANA, "s1")
        await _talk(rt, BOB, "s1")
        await rt.erase(target, reason="dsr", attestation=OPERATOR)
        # The update of ana's session ended before the erasure: its report held the summary text.
        assert await rt.resources.settle_summary(ANA, "s1") is None
        bob = await rt.resources.settle_summary(BOB, "s1")
        if target.user_id is None:  # the tenant went: bob's session with it
            assert bob is None
        else:
            assert bob is not None and bob.state is not None and SECRET in bob.state.summary.text


class Raising(ExtractiveSummarizer):
    async def summarize(self, previous: TaskSummary | None, groups: Any, ctx: OpContext) -> TaskSummary:
        raise RuntimeError(f"summarizer down while reading {groups[0].messages[0].content}")


async def test_a_failure_nobody_was_told_of_in_an_erased_session_is_still_counted_by_aclose() -> None:
    rt = _runtime(Raising())
    await _talk(rt, ANA, "s1")
    await rt.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
    assert await rt.resources.settle_summary(ANA, "s1") is None
    # Counted, not named: the report (whose error quoted the session's text) went with the session.
    with pytest.raises(RuntimeCloseError, match="not listed") as raised:
        await rt.aclose()
    assert SECRET not in str(raised.value)


async def test_settle_summary_hands_out_no_text_a_forget_erasure_removed() -> None:
    archive = InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=True),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    async with rt:
        await _talk(rt, ANA, "s1")
        await rt.run(ANA, "s1", "And the weather is fine.")
        (group,) = await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, OpContext())
        scope = MemoryScope("acme", "ana")
        fact = MemoryFact(scope, f"the vault code is {SECRET}0", provenance=[GroupRef("s1", 0, group.digest)])
        ack = await rt.memory.remember(fact)
        assert ack.fact_id is not None
        await rt.forget(scope, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
        report = await rt.resources.settle_summary(ANA, "s1")
        assert report is None or report.state is None or SECRET not in report.state.summary.text


async def _trimmed(archive: Any, **stores: Any) -> Any:
    """A runtime whose summary covers group 0 of ana's s1 after retention erased that group."""
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=stores.pop("session_store", InMemorySessionStore()),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        memory=stores.pop("memory", InMemoryMemoryStore()),
        **stores,
        retention=RetentionPolicy(max_archived_groups=2),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    await _talk(rt, ANA, "s1")
    await rt.run(ANA, "s1", "And the weather is fine.")
    return rt


async def _remember_group0(rt: Any, archive: Any, digest: str | None = None) -> str:
    (group,) = await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, OpContext())
    fact = MemoryFact(
        MemoryScope("acme", "ana"),
        f"the vault code is {SECRET}0",
        provenance=[GroupRef("s1", 0, digest or group.digest)],
    )
    ack = await rt.memory.remember(fact)
    assert ack.fact_id is not None
    await rt.apply_retention(OPERATOR)  # erases group 0; the summary keeps its text (retention)
    summary = (await rt.run(ANA, "s1", "Anything else?")).summary
    assert summary is not None and f"{SECRET}0" in summary.summary.text
    return str(ack.fact_id)


async def test_forget_erase_sources_empties_a_summary_covering_a_source_retention_erased() -> None:
    archive = InMemoryArchive()
    async with await _trimmed(archive) as rt:
        fact_id = await _remember_group0(rt, archive)
        scope = MemoryScope("acme", "ana")
        result = await rt.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
        # The group itself was gone already; the summary written from it is reported, then emptied.
        places = {(h.place, h.state) for h in result.sources}
        assert (SourcePlace.SUMMARY, SourceState.ERASED) in places
        assert result.still_held == ()
        after = (await rt.run(ANA, "s1", "What was the code?")).summary
        assert after is not None and f"{SECRET}0" not in after.summary.text


async def test_forget_reports_a_summary_covering_a_source_retention_erased_as_still_holding_it() -> None:
    archive = InMemoryArchive()
    async with await _trimmed(archive) as rt:
        fact_id = await _remember_group0(rt, archive)
        result = await rt.forget(MemoryScope("acme", "ana"), fact_id)
        assert [(h.seq, h.place) for h in result.still_held] == [(0, SourcePlace.SUMMARY)]


async def test_a_summary_citing_an_erased_seq_with_another_digest_is_not_a_source() -> None:
    archive = InMemoryArchive()
    async with await _trimmed(archive) as rt:
        fact_id = await _remember_group0(rt, archive, digest="sha256:" + "0" * 64)
        scope = MemoryScope("acme", "ana")
        result = await rt.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
        assert [h.place for h in result.sources] == [SourcePlace.GONE]
        assert result.erasures == ()
        kept = (await rt.run(ANA, "s1", "Anything else?")).summary
        assert kept is not None and f"{SECRET}0" in kept.summary.text


async def test_the_emptied_summarys_text_leaves_the_sqlite_file(tmp_path: Path) -> None:
    db = str(tmp_path / "agentium.db")
    config = SQLiteConfig(path=db)
    archive = SQLiteArchive(config)
    stores = {
        "session_store": SQLiteSessionStore(config),
        "memory": SQLiteMemoryStore(config),
        "recall": SQLiteRecallStore(SQLiteRecallConfig(path=db)),
    }
    async with await _trimmed(archive, **stores) as rt:
        fact_id = await _remember_group0(rt, archive)
        assert f"{SECRET}0".encode() in database_bytes(db)  # the summary states it
        scope = MemoryScope("acme", "ana")
        await rt.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
        after = (await rt.inspect_session(ANA, "s1")).summary
        assert after is not None and f"{SECRET}0" not in after.summary.text
    assert f"{SECRET}0".encode() not in database_bytes(db)


def test_a_forget_of_groups_past_the_frontier_leaves_a_summary_citing_a_retention_erased_group() -> None:
    # Group 0 was erased by retention (the summary keeps its text, its citation says erased); a
    # later forget erases group 6, past the frontier: the summary states nothing of it. It was
    # emptied anyway, because its citation of group 0 lies in *an* erased range, and its note
    # then claimed it covered a forgotten fact's sources.
    digest = "sha256:" + "1" * 64
    text = "[g0] The pump is red.\n[g3] The valve is shut."
    summary = TaskSummary(text, frontier=4, citations=(Citation(0, digest), Citation(3, digest)))
    state = SummaryState(summary, (), (0,), given_until=4)  # its summarizer was given groups 0-3
    after = _summary_after(state, (SeqRange(0, 1), SeqRange(6, 7)), False, (SeqRange(6, 7),), 8)
    assert after == state
    # A forget of the retention-erased group itself still empties it (it may state the fact).
    again = _summary_after(state, (SeqRange(0, 1),), False, (SeqRange(0, 1),), 8)
    assert again is not None and again.summary.text == "" and again.summary.citations == ()


def test_a_forget_empties_a_summary_whose_summarizer_was_given_the_group_past_its_frontier() -> None:
    summary = TaskSummary("The pump is red. The valve is shut.", frontier=4)
    # Given groups 4-6 too, it folded none of them (frontier 4), yet its text may state them.
    given = SummaryState(summary, given_until=7)
    after = _summary_after(given, (SeqRange(6, 7),), False, (SeqRange(6, 7),), 8)
    assert after is not None and after.summary.text == "" and after.summary.frontier == 4
    assert after.given_until == 7  # how far the emptied text reached, for a resumed erasure
    # Not given group 7: nothing of it is in the text.
    assert _summary_after(given, (SeqRange(7, 8),), False, (SeqRange(7, 8),), 8) == given
    # A state saved before given_until existed may state any archived group: emptied too.
    legacy = SummaryState(summary)
    emptied = _summary_after(legacy, (SeqRange(7, 8),), False, (SeqRange(7, 8),), 8)
    assert emptied is not None and emptied.summary.text == ""


class HoldsBackTheNewest(ExtractiveSummarizer):
    """Folds all but the newest group it is given (a frontier below them), writing every group it read."""

    async def summarize(self, previous: TaskSummary | None, groups: Any, ctx: OpContext) -> TaskSummary:
        lines = previous.text.splitlines() if previous is not None and previous.text else []
        lines += [
            m.content for g in groups for m in g.messages if m.role.value == "user" and m.content not in lines
        ]
        start = previous.frontier if previous is not None else groups[0].seq
        return TaskSummary("\n".join(lines), frontier=max(start, groups[-1].seq))


async def test_forget_erase_sources_empties_a_summary_stating_a_group_past_its_frontier() -> None:
    archive = InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        summarizer=HoldsBackTheNewest(),
        summary_limits=SummaryLimits(background=False),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    async with rt:
        await _talk(rt, ANA, "s1")
        shown = (await rt.inspect_session(ANA, "s1")).summary
        # Groups 0 and 1 given, 0 folded: the text states group 1, past the frontier.
        assert shown is not None and shown.summary.frontier == 1 and f"{SECRET}1" in shown.summary.text
        assert shown.given_until == 2
        (group,) = await archive.read_groups(SessionKey("acme", "ana", "s1"), 1, 1, OpContext())
        scope = MemoryScope("acme", "ana")
        fact = MemoryFact(scope, f"code 1 is {SECRET}1", provenance=[GroupRef("s1", 1, group.digest)])
        ack = await rt.memory.remember(fact)
        assert ack.fact_id is not None
        # Without erasure, the summary is reported as still holding it.
        held = await rt.forget(scope, ack.fact_id)
        assert {(h.seq, h.place) for h in held.still_held} == {
            (1, SourcePlace.ARCHIVED),
            (1, SourcePlace.SUMMARY),
        }
        ack = await rt.memory.remember(fact)
        assert ack.fact_id is not None
        result = await rt.forget(scope, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
        assert (1, SourcePlace.SUMMARY, SourceState.ERASED) in {
            (h.seq, h.place, h.state) for h in result.sources
        }
        assert result.still_held == ()
        after = (await rt.inspect_session(ANA, "s1")).summary
        assert after is not None and after.summary.text == "" and f"{SECRET}1" not in str(after)
