"""``forget`` reaches recall (issue 23, item 4): a forgotten fact's text never reaches a later request.

The fact came from archived groups of a session. Before it is forgotten its
text reaches that session's requests three ways: memory injection, recall
of the archived group, and the task summary citing it. After
``runtime.forget(..., erase_sources=True)`` a later request in the session
— and in another — carries it by none of them; without ``erase_sources``
the result names every place that still holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _archive_support import GatedReads

from agentium_harness import (
    ArchiveError,
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureKind,
    FactStatus,
    GroupRef,
    InvalidArgumentError,
    MemoryFact,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionBusyError,
    SessionKey,
    SourcePlace,
    SourceState,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters import _sqlite_sql
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    MAX_LOOKUP_LIMIT,
    MemoryCapabilities,
    MemoryRejectedError,
    OpContext,
    SummarizerCapabilities,
    TaskSummary,
)
from agentium_harness.testing.sqlite_rows import with_inflated_rows

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 12")
SCOPE = MemoryScope("acme", "ana")
SECRET = "zephyrcode4471"


class Recording(ScriptedProvider):
    """Keeps every request it answers, rendered: instructions, sources, history and turn."""

    capabilities = ScriptedProvider.capabilities

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.seen: list[str] = []

    async def complete(self, request: Any, ctx: Any) -> Any:
        messages = " ".join(m.content for m in (*request.history, *request.turn))
        self.seen.append(" ".join((request.instructions, request.render_sources(), messages)))
        return await super().complete(request, ctx)


async def _setup(summarizer: Any = None, **stores: Any) -> tuple[Any, Recording, Any, str]:
    """Three turns (groups 0 and 1 archived and summarized) and a fact whose source is group 0.

    ``stores`` replace the in-memory archive, session store, recall and memory stores;
    ``summarizer`` the extractive summarizer.
    """
    provider = Recording()
    given = list(stores.values())  # closed with the runtime
    archive = stores.pop("archive", None) or InMemoryArchive()
    rt = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=stores.pop("session_store", None) or InMemorySessionStore(),
        recall=stores.pop("recall", None) or InMemoryRecallStore(),
        summarizer=summarizer or ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        memory=stores.pop("memory", None) or InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        owned=given,
    )
    await rt.run(ANA, "s1", f"My vault code is {SECRET}. Remember the vault code.")
    await rt.run(ANA, "s1", "The weather is fine today.")
    await rt.run(ANA, "s1", "Tell me about the weather again.")  # group 0 and 1 archived, summarized
    (group,) = await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, OpContext())
    ack = await rt.memory.remember(
        MemoryFact(SCOPE, f"ana's vault code is {SECRET}", provenance=[GroupRef("s1", 0, group.digest)])
    )
    assert ack.fact_id is not None
    return rt, provider, archive, ack.fact_id


async def test_a_forgotten_fact_with_erased_sources_reaches_no_later_request() -> None:
    rt, provider, archive, fact_id = await _setup()
    provider.seen.clear()
    await rt.run(ANA, "s1", "What is my vault code?")
    assert SECRET in provider.seen[-1], "the fact's text reached the request before it was forgotten"

    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)

    assert result.ack.ok
    places = {(h.place, h.state) for h in result.sources}
    assert (SourcePlace.ARCHIVED, SourceState.ERASED) in places
    assert result.still_held == ()
    (erasure,) = result.erasures
    assert erasure.tombstone is not None and erasure.record.kind is ErasureKind.FORGET
    assert erasure.record.reason == "user asked" and erasure.record.statement == "ticket 12"
    key = SessionKey("acme", "ana", "s1")
    assert [g.seq for g in await archive.read_groups(key, 0, 10, OpContext())] == [1, 2]
    provider.seen.clear()
    await rt.run(ANA, "s1", "What is my vault code? The vault code please.")
    await rt.run(ANA, "s2", "What is my vault code?")
    assert provider.seen and all(SECRET not in text for text in provider.seen)
    view = await rt.inspect_session(ANA, "s1")
    assert view.summary is not None and SECRET not in view.summary.summary.text
    await rt.aclose()


class Uncited(ExtractiveSummarizer):
    """The extractive summary without its citations: a summarizer need not cite (``citations=False``)."""

    capabilities = SummarizerCapabilities(incremental=True, citations=False)

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> TaskSummary:
        return attrs.evolve(await super().summarize(previous, groups, ctx), citations=())


async def test_a_summary_covering_an_erased_source_loses_its_text_even_without_citing_it() -> None:
    # The summary's text states the fact, but it cites nothing: covering the source is what counts.
    rt, provider, archive, fact_id = await _setup(Uncited())
    before = (await rt.inspect_session(ANA, "s1")).summary
    assert before is not None and SECRET in before.summary.text and before.summary.citations == ()
    looked = await rt.forget(SCOPE, fact_id)  # a fresh fact below: this one only reports
    assert ("s1", 0, SourcePlace.SUMMARY) in {(h.session.session, h.seq, h.place) for h in looked.still_held}
    (group,) = await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, OpContext())
    ack = await rt.memory.remember(
        MemoryFact(SCOPE, f"ana's vault code is {SECRET}", provenance=[GroupRef("s1", 0, group.digest)])
    )
    assert ack.fact_id is not None
    result = await rt.forget(SCOPE, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert (0, SourcePlace.SUMMARY, SourceState.ERASED) in {(h.seq, h.place, h.state) for h in result.sources}
    after = (await rt.inspect_session(ANA, "s1")).summary
    assert after is not None and SECRET not in after.summary.text
    assert any("forgotten fact" in note for note in after.summary.uncertainty)
    provider.seen.clear()
    await rt.run(ANA, "s1", "What is my vault code? The vault code please.")
    assert provider.seen and all(SECRET not in text for text in provider.seen)
    await rt.aclose()


class Unsure(ExtractiveSummarizer):
    """The extractive summary, with an uncertainty note that states what it is unsure of."""

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> TaskSummary:
        summary = await super().summarize(previous, groups, ctx)
        notes = list(summary.uncertainty)
        if any(SECRET in g.messages[0].content for g in groups):
            notes.append(f"not sure the vault code {SECRET} is still valid")
        return attrs.evolve(summary, uncertainty=tuple(notes))


async def test_an_emptied_summary_keeps_none_of_its_uncertainty_notes() -> None:
    # The summarizer writes its notes with its text, and they may state the fact too: the next
    # summary carries the notes it is given forward into every later request's summary block.
    rt, provider, _, fact_id = await _setup(Unsure())
    before = (await rt.inspect_session(ANA, "s1")).summary
    assert before is not None and any(SECRET in n for n in before.summary.uncertainty)
    await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    after = (await rt.inspect_session(ANA, "s1")).summary
    assert after is not None and after.summary.text == ""
    assert len(after.summary.uncertainty) == 1 and "forgotten fact" in after.summary.uncertainty[0]
    provider.seen.clear()
    for question in ("What about the sea?", "What is my vault code?"):
        await rt.run(ANA, "s1", question)
    assert provider.seen and all(SECRET not in text for text in provider.seen)
    await rt.aclose()


class OnlyUnsure(Unsure):
    """Notes only, no text yet: the notes still state the fact."""

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> TaskSummary:
        summary = await super().summarize(previous, groups, ctx)
        return attrs.evolve(summary, text="", citations=())


async def test_a_summary_with_only_uncertainty_notes_is_emptied_of_them_too() -> None:
    rt, _, _, fact_id = await _setup(OnlyUnsure())
    before = (await rt.inspect_session(ANA, "s1")).summary
    assert before is not None and before.summary.text == ""
    assert any(SECRET in n for n in before.summary.uncertainty)
    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert (0, SourcePlace.SUMMARY, SourceState.ERASED) in {(h.seq, h.place, h.state) for h in result.sources}
    after = (await rt.inspect_session(ANA, "s1")).summary
    assert after is not None and not any(SECRET in n for n in after.summary.uncertainty)
    await rt.aclose()


async def test_forget_without_erasing_names_every_place_that_still_holds_the_text() -> None:
    rt, provider, archive, fact_id = await _setup()
    result = await rt.forget(SCOPE, fact_id)
    held = {(h.session.session, h.seq, h.place) for h in result.still_held}
    assert {("s1", 0, SourcePlace.ARCHIVED), ("s1", 0, SourcePlace.SUMMARY)} <= held
    assert result.erasures == ()
    assert len(await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 10, OpContext())) == 2
    # Forgetting the fact alone is not enough: recall and the summary still carry its text.
    provider.seen.clear()
    await rt.run(ANA, "s1", "What is my vault code? The vault code please.")
    assert SECRET in provider.seen[-1]
    await rt.aclose()


async def test_a_resident_source_is_reported_as_still_holding_the_text() -> None:
    sessions = InMemorySessionStore()
    rt, _, _, _ = await _setup(session_store=sessions)
    stored = await sessions.load(SessionKey("acme", "ana", "s1"), OpContext())
    assert stored is not None
    group = stored.snapshot.resident[-1]
    resident, digest = group.seq, group.digest
    ack = await rt.memory.remember(
        MemoryFact(SCOPE, "weather is fine", provenance=[GroupRef("s1", resident, digest)])
    )
    assert ack.fact_id is not None
    result = await rt.forget(SCOPE, ack.fact_id, erase_sources=True, reason="why", attestation=OPERATOR)
    assert [(h.seq, h.place, h.state) for h in result.still_held] == [
        (resident, SourcePlace.RESIDENT, SourceState.HOLDS_TEXT)
    ]
    assert result.erasures == () and any("resident" in n for n in result.notes)
    await rt.aclose()


async def test_forget_with_erase_sources_needs_an_operator_before_anything_changes() -> None:
    rt, _, _, fact_id = await _setup()
    with pytest.raises(InvalidArgumentError):
        await rt.forget(SCOPE, fact_id, erase_sources=True)
    assert [f.fact_id for f in await rt.memory.list(SCOPE)] == [fact_id], "the fact was forgotten anyway"
    await rt.aclose()


def _database_files(folder: Path) -> dict[str, bytes]:
    """The bytes of the database, its log and its shared-memory index, deflated rows inflated."""
    return {
        p.name: with_inflated_rows(p.read_bytes())
        for p in folder.iterdir()
        if p.name.startswith("agentium.db")
    }


async def test_a_forgotten_facts_summary_text_leaves_the_sqlite_files_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The summary loses its text in a snapshot rewrite made after the stores' erasures had
    # checkpointed and truncated the log: the old text stayed in the log (and the file) until
    # some later checkpoint. The rewrite is cleaned up as the erasures are.
    db = str(tmp_path / "agentium.db")
    config = SQLiteConfig(path=db)
    rt, _, _, fact_id = await _setup(
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        recall=SQLiteRecallStore(SQLiteRecallConfig(path=db)),
        memory=SQLiteMemoryStore(config),
    )
    async with rt:
        summary = (await rt.inspect_session(ANA, "s1")).summary
        assert summary is not None and SECRET in summary.summary.text
        rebuilds: list[float] = []
        rebuild = _sqlite_sql._rebuild_file
        monkeypatch.setattr(
            _sqlite_sql, "_rebuild_file", lambda conn, stop: rebuilds.append(stop) or rebuild(conn, stop)
        )
        result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="asked", attestation=OPERATOR)
        (erasure,) = result.erasures
        assert erasure.tombstone is not None and erasure.record.notes == ()
        # The memory store's forget cleans up its file; the erasure of the sources (recall, archive,
        # then the session store after the summary's rewrite, all on that file) rebuilds it once.
        assert len(rebuilds) == 2
        files = _database_files(tmp_path)
        assert "agentium.db" in files
        assert [name for name, data in files.items() if SECRET.encode() in data] == []


async def test_a_provenance_digest_that_matches_no_stored_group_erases_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cited seq counts only if the stored group there has the cited digest (forged provenance)."""
    rt, _, archive, real_fact = await _setup()
    key = SessionKey("acme", "ana", "s1")
    view = await rt.inspect_session(ANA, "s1")
    forged = "sha256:" + "0" * 64
    ack = await rt.memory.remember(
        MemoryFact(
            SCOPE,
            "ana likes tea",
            provenance=[
                GroupRef("s1", 1, forged),  # archived, unrelated to this fact
                GroupRef("s1", 0, forged),  # archived and cited by the summary
                GroupRef("s1", view.resident_seqs[-1], forged),  # resident
                GroupRef("no-such-session", 7, forged),
            ],
        )
    )
    assert ack.fact_id is not None
    with caplog.at_level("WARNING", logger="agentium.engine.memory"):
        result = await rt.forget(SCOPE, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert result.ack.ok and result.erasures == () and result.still_held == ()
    # Not the fact's sources, and never erased by anyone: not held here (never "gone").
    assert {(h.place, h.state) for h in result.sources} == {(SourcePlace.NOT_HELD, SourceState.NOT_HELD)}
    assert any("digest the stored group does not have" in n for n in result.notes)
    assert [g.seq for g in await archive.read_groups(key, 0, 10, OpContext())] == [0, 1]
    view = await rt.inspect_session(ANA, "s1")
    assert view.summary is not None and SECRET in view.summary.summary.text, "the summary was emptied"
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned and all("tea" not in m for m in warned)
    # A fact whose provenance is right still has its source found and erased.
    real = await rt.forget(SCOPE, real_fact, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert (0, SourcePlace.ARCHIVED, SourceState.ERASED) in {(h.seq, h.place, h.state) for h in real.sources}
    assert [g.seq for g in await archive.read_groups(key, 0, 10, OpContext())] == [1]
    await rt.aclose()


async def test_an_erasure_refused_by_a_run_on_the_session_leaves_the_fact_and_forget_can_be_repeated() -> (
    None
):
    # The fact was forgotten first (its provenance emptied) and the sources' erasure then refused
    # with SessionBusyError: the archived text stayed and no later forget could find it again.
    rt, provider, archive, fact_id = await _setup()
    entered, release = anyio.Event(), anyio.Event()
    answer = provider.complete

    async def held(request: Any, ctx: Any) -> Any:
        entered.set()
        await release.wait()
        return await answer(request, ctx)

    provider.complete = held  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.run, ANA, "s1", "a turn that holds the session")
        await entered.wait()
        with pytest.raises(SessionBusyError):
            await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
        release.set()
    (revision,) = await rt.memory.history(SCOPE, fact_id)
    assert revision.status is FactStatus.CURRENT and [r.seq for r in revision.fact.provenance] == [0]
    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
    assert result.ack.ok and (SourcePlace.ARCHIVED, SourceState.ERASED) in {
        (h.place, h.state) for h in result.sources
    }
    key = SessionKey("acme", "ana", "s1")
    assert 0 not in [g.seq for g in await archive.read_groups(key, 0, 10, OpContext())]
    await rt.aclose()


class _StopsOnceArchive(InMemoryArchive):
    """Erases, then fails the first real erase call (a store that stops part way)."""

    capabilities = InMemoryArchive.capabilities
    stopped = False

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        if not dry_run and not self.stopped:
            self.stopped = True
            raise ArchiveError("stopped part way")
        return report


async def test_an_erasure_that_stops_leaves_the_fact_until_it_is_resumed_and_forget_is_called_again() -> None:
    rt, _, _, fact_id = await _setup(archive=_StopsOnceArchive())
    with pytest.raises(ErasureIncompleteError):
        await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
    (revision,) = await rt.memory.history(SCOPE, fact_id)
    assert revision.status is FactStatus.CURRENT  # not forgotten: its sources can still be found
    # While the erasure is pending, forget is refused as the erasure would be (not a false corruption).
    with pytest.raises(ErasureInProgressError):
        await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
    (resumed,) = await rt.resume_erasures(OPERATOR)
    assert resumed.tombstone is not None
    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
    assert result.ack.ok and result.still_held == ()
    assert {(h.place, h.state) for h in result.sources} == {(SourcePlace.GONE, SourceState.ERASED)}
    await rt.aclose()


class _SessionEraseStops(InMemorySessionStore):
    """A session store whose erase of a whole session fails (the erasure stays pending)."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        if not dry_run and target.session_id is not None and not target.groups:
            raise ArchiveError("stopped part way")
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


@pytest.mark.parametrize("meanwhile", ["sources_erased", "erasure_pending"])
async def test_another_runtimes_erasure_while_sources_are_looked_up_is_not_reported_as_damage(
    meanwhile: str,
) -> None:
    # Another runtime (process) erases archived groups of the session while this forget reads
    # them: the rows the loaded snapshot names are gone. That is not archive damage: a snapshot
    # that moved on is looked at afresh (the group is gone), an erasure under way refuses the call.
    archive, store, memory = GatedReads(), _SessionEraseStops(), InMemoryMemoryStore()
    here, there = (
        create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=store,
            memory=memory,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
        for _ in range(2)
    )
    key = SessionKey("acme", "ana", "s1")
    async with here, there:
        for n in range(3):
            await here.run(ANA, "s1", f"turn {n}")  # groups 0 and 1 archived
        (group,) = await archive.read_groups(key, 0, 1, OpContext())
        cited = [GroupRef("s1", 0, group.digest)]
        mine, theirs = [
            (await here.memory.remember(MemoryFact(SCOPE, text, provenance=cited))).fact_id
            for text in ("ana likes tea", "ana likes green tea")
        ]
        assert mine is not None and theirs is not None
        gate = archive.gate = anyio.Event()
        caught: list[BaseException] = []
        results: list[Any] = []

        async def forget() -> None:
            try:
                results.append(
                    await here.forget(SCOPE, mine, erase_sources=True, reason="dsr", attestation=OPERATOR)
                )
            except Exception as exc:
                caught.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(forget)
            await archive.entered.wait()
            if meanwhile == "sources_erased":
                await there.forget(SCOPE, theirs, erase_sources=True, reason="dsr", attestation=OPERATOR)
            else:
                with pytest.raises(ErasureIncompleteError):
                    await there.erase(
                        EraseTarget.session("acme", "ana", "s1"), reason="x", attestation=OPERATOR
                    )
            gate.set()
        if meanwhile == "sources_erased":
            assert caught == [], caught
            (result,) = results
            assert result.ack.ok and result.erasures == ()
            assert {(h.seq, h.place) for h in result.sources} == {(0, SourcePlace.GONE)}
        else:
            [error] = caught
            assert isinstance(error, ErasureInProgressError), repr(error)


class _SwappedHistory(InMemoryMemoryStore):
    """A broken store: the history of one fact id is another fact's revisions (same tenant and user)."""

    def __init__(self) -> None:
        super().__init__()
        self.swap: dict[str, str] = {}

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Any:
        return await super().history(scope, self.swap.get(fact_id, fact_id), ctx)


async def test_a_store_whose_history_names_another_fact_erases_none_of_that_facts_sources() -> None:
    """runtime.forget erases what the history cites: another fact's revisions are refused before erasing."""
    from agentium_harness import ContractViolationError

    store = _SwappedHistory()
    rt, _, archive, victim = await _setup(memory=store)
    other = await rt.memory.remember(MemoryFact(SCOPE, "an unrelated fact"))
    assert other.fact_id is not None
    store.swap[other.fact_id] = victim
    with pytest.raises(ContractViolationError, match="holds another fact") as refused:
        await rt.forget(SCOPE, other.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert other.fact_id not in str(refused.value)  # hosts log error texts: an id is content (no capture)
    key = SessionKey("acme", "ana", "s1")
    assert [g.seq for g in await archive.read_groups(key, 0, 5, OpContext())] == [0, 1]
    assert {f.fact_id for f in await rt.memory.list(SCOPE)} == {victim, other.fact_id}
    await rt.aclose()


class _NoHistory(InMemoryMemoryStore):
    """A store that lists but keeps no history: runtime.forget finds provenance in one bounded listing."""

    capabilities = MemoryCapabilities(
        acknowledged_writes=True, correction=True, forgetting=True, listing=True
    )


async def test_a_fact_past_the_listing_of_a_store_without_history_is_refused_unchanged() -> None:
    """Its sources cannot be seen: forgetting would leave them for good while reporting none."""
    rt, _, archive, fact_id = await _setup(memory=_NoHistory())
    for i in range(MAX_LOOKUP_LIMIT):
        await rt.memory.remember(MemoryFact(SCOPE, f"a newer fact {i}"))
    with pytest.raises(MemoryRejectedError, match="not among the 200 newest"):
        await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    key = SessionKey("acme", "ana", "s1")
    assert [g.seq for g in await archive.read_groups(key, 0, 5, OpContext())] == [0, 1]
    assert fact_id not in rt.memory.forgotten_ids
    # Within the listing, its sources are found and erased as with a history.
    await rt.memory.forget(SCOPE, (await rt.memory.list(SCOPE, 1))[0].fact_id)
    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert result.ack.ok and {(h.seq, h.state) for h in result.sources} >= {(0, SourceState.ERASED)}
    await rt.aclose()


class _RepeatsInListing(_NoHistory):
    """Lists its newest fact over and over: a full answer that holds one fact."""

    async def list_facts(self, scope: Any, limit: int, ctx: OpContext) -> Any:
        return list(await super().list_facts(scope, 1, ctx)) * limit


async def test_a_full_listing_of_repeats_is_still_full_for_forget() -> None:
    """The engine drops repeats from a listing, but the store's answer was full: the fact may be past it."""
    rt, _, archive, fact_id = await _setup(memory=_RepeatsInListing())
    await rt.memory.remember(MemoryFact(SCOPE, "a newer fact"))
    assert len(await rt.memory.list(SCOPE, MAX_LOOKUP_LIMIT)) == 1
    with pytest.raises(MemoryRejectedError, match="not among the"):
        await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    key = SessionKey("acme", "ana", "s1")
    assert [g.seq for g in await archive.read_groups(key, 0, 5, OpContext())] == [0, 1]
    assert fact_id not in rt.memory.forgotten_ids
    await rt.aclose()


class _CorrectsDuringErase(InMemoryArchive):
    """Runs ``meanwhile`` once, inside the first erase: a host's correction racing runtime.forget."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Any = None

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        hook, self.meanwhile = self.meanwhile, None
        if hook is not None:
            await hook()
        return await super().erase(target, ctx, **kwargs)


async def test_a_correction_racing_forget_has_its_new_sources_found_too() -> None:
    """A correction while the sources are erased cites a group the first read did not see: it is erased too.

    Before, the fact was forgotten with every revision (the new provenance emptied for good) and the
    newly cited group kept its text, reported nowhere.
    """
    archive = _CorrectsDuringErase()
    rt, _, _, fact_id = await _setup(archive=archive)
    key = SessionKey("acme", "ana", "s1")
    second = (await archive.read_groups(key, 1, 1, OpContext()))[0]

    async def correct() -> None:
        refs = [GroupRef("s1", 1, second.digest)]
        await rt.memory.correct(
            SCOPE, fact_id, MemoryFact(SCOPE, f"ana's code is still {SECRET}", provenance=refs)
        )

    archive.meanwhile = correct
    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert result.ack.ok
    assert await archive.read_groups(key, 0, 5, OpContext()) == []
    assert {h.seq for h in result.sources if h.state is SourceState.ERASED} >= {0, 1}
    assert [r.status for r in await rt.memory.history(SCOPE, fact_id)][-1] is FactStatus.FORGOTTEN
    await rt.aclose()
