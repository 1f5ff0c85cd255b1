"""What honours a session's view after ``retract`` and ``reset_view`` (issue 22, item 1).

Recall leaves out the archived groups the view no longer shows, summaries
are offered only the view's part of each group and restart when what they
cover leaves the view, the snapshot's view state is checked on load, and
everything works the same on the SQLite pair (one joint transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from _erasure_harness import OPERATOR

from agentium_harness import (
    EraseTarget,
    Message,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionKey,
    SnapshotCorruptError,
    SummaryLimits,
    TaskSummary,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.sessions import seal_snapshot
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import MessageGroup, ModelRequest, OpContext, SourceKind
from agentium_harness.testing import record_requests

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
FACT = "Remember: the badge office closes at 16:30."
QUESTION = "When does the badge office close?"


class Watching(ExtractiveSummarizer):
    """The real extractive summarizer, keeping every batch of groups it was offered."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: list[list[MessageGroup]] = []

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        self.offered.append(list(groups))
        return await super().summarize(previous, groups, ctx)


def chatter(n: int) -> list[Message]:
    return [Message(Role.USER, f"Unrelated chatter number {n}."), Message(Role.ASSISTANT, "Noted.")]


def recalled_groups(request: ModelRequest) -> list[str]:
    return [b.source_id for b in request.sources if b.source_id.startswith("group/")]


def recall_runtime() -> tuple[Any, list[ModelRequest]]:
    provider = ExtractiveProvider()
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=InMemoryRecallStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    return rt, record_requests(provider)


async def test_recall_brings_back_an_archived_fact_until_the_view_is_reset() -> None:
    rt, requests = recall_runtime()
    await rt.append(ANA, "s1", [Message(Role.USER, FACT), Message(Role.ASSISTANT, "Noted.")])
    for n in range(3):
        await rt.append(ANA, "s1", chatter(n))
    await rt.run(ANA, "s1", QUESTION)
    assert "group/acme/ana/s1/0" in recalled_groups(requests[-1])  # the test can fail
    await rt.reset_view(ANA, "s1", reason="clear_session")
    result = await rt.run(ANA, "s1", QUESTION)
    assert recalled_groups(requests[-1]) == []
    assert "16:30" not in result.output
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert any("group/acme/ana/s1/0" in n and "view" in n for n in notes), result.diagnostics


async def test_recall_leaves_out_an_archived_group_a_retraction_touched() -> None:
    rt, requests = recall_runtime()
    await rt.append(ANA, "s1", [Message(Role.USER, "Hello there."), Message(Role.ASSISTANT, FACT)])
    await rt.retract(ANA, "s1", reason="the reply was wrong")
    for n in range(3):
        await rt.append(ANA, "s1", chatter(n))
    result = await rt.run(ANA, "s1", QUESTION)
    assert recalled_groups(requests[-1]) == []
    assert "16:30" not in result.output
    assert not any("16:30" in m.content for m in requests[-1].history)


def summary_runtime(summarizer: ExtractiveSummarizer, provider: Any = None) -> Any:
    return create_harness_runtime(
        provider=provider or ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def test_the_summarizer_is_offered_only_what_the_view_shows() -> None:
    watching = Watching()
    rt = summary_runtime(watching)
    await rt.append(
        ANA, "s1", [Message(Role.USER, "What is the code word?"), Message(Role.ASSISTANT, "ZEBRA.")]
    )
    await rt.retract(ANA, "s1", reason="never say it")
    for n in range(3):
        await rt.append(ANA, "s1", chatter(n))
    offered = [g for batch in watching.offered for g in batch]
    assert offered and offered[0].seq == 0
    assert [m.content for m in offered[0].messages] == ["What is the code word?"]
    assert all(g.control is None for g in offered)  # the retraction's control group is passed over
    view = await rt.inspect_session(ANA, "s1")
    assert view.summary is not None and "ZEBRA" not in view.summary.summary.text
    # The citation names the canonical group as committed, not the copy the summarizer saw.
    canonical = (await rt.read_history(ANA, "s1", before_seq=1, max_groups=1, view=False)).groups[0]
    cited = {c.seq: c.digest for c in view.summary.summary.citations}
    assert cited.get(0) == canonical.digest


async def test_a_summary_restarts_when_a_retraction_or_reset_takes_what_it_covers() -> None:
    rt = summary_runtime(ExtractiveSummarizer())
    await rt.append(
        ANA, "s1", [Message(Role.USER, "The launch site is Kourou."), Message(Role.ASSISTANT, "OK.")]
    )
    for n in range(3):
        await rt.append(ANA, "s1", chatter(n))
    before = (await rt.inspect_session(ANA, "s1")).summary
    assert before is not None and before.summary.frontier >= 1
    assert "Kourou" in before.summary.text and "OK." in before.summary.text
    popped = await rt.retract(ANA, "s1", count=7, reason="undo back to the first question")
    assert popped.messages[0].content == "OK."
    assert any(d.code == "summary_restarted" for d in popped.diagnostics)
    # Started again from the view's start and folded inline: the retracted reply is gone from it.
    folded = (await rt.inspect_session(ANA, "s1")).summary
    assert folded is not None and "Kourou" in folded.summary.text and "OK." not in folded.summary.text
    for n in range(3, 6):
        await rt.append(ANA, "s1", chatter(n))
    folded = (await rt.inspect_session(ANA, "s1")).summary
    assert folded is not None and "Kourou" in folded.summary.text and "OK." not in folded.summary.text
    reset = await rt.reset_view(ANA, "s1", reason="clear")
    assert any(d.code == "summary_restarted" for d in reset.diagnostics)
    cleared = (await rt.inspect_session(ANA, "s1")).summary
    assert cleared is not None and cleared.summary.text == ""
    for n in range(6, 10):
        await rt.append(ANA, "s1", chatter(n))
    after = (await rt.inspect_session(ANA, "s1")).summary
    assert after is not None and "Kourou" not in after.summary.text


@pytest.mark.parametrize("control", ["retract", "reset_view"])
async def test_a_runtime_without_a_summarizer_restarts_the_stored_summary_too(control: str) -> None:
    """A control record written through a runtime that does not summarize (an admin service, a
    second process) restarts the summary the session's summarizing runtime stored, so that runtime
    never sends summary text stating what was taken out of the view."""
    archive, store = InMemoryArchive(), InMemorySessionStore()
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=2))
    summarizing = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=limits,
    )
    plain = create_harness_runtime(
        provider=ExtractiveProvider(), archive=archive, session_store=store, limits=limits
    )
    await summarizing.append(
        ANA, "s1", [Message(Role.USER, "The launch code is KOUROU-88."), Message(Role.ASSISTANT, "OK.")]
    )
    for n in range(3):
        await summarizing.append(ANA, "s1", chatter(n))
    before = (await summarizing.inspect_session(ANA, "s1")).summary
    assert before is not None and "KOUROU-88" in before.summary.text
    if control == "retract":
        done = await plain.retract(ANA, "s1", count=8, reason="undo everything")
    else:
        done = await plain.reset_view(ANA, "s1", reason="clear")
    assert any(d.code == "summary_restarted" for d in done.diagnostics)
    stored = (await summarizing.inspect_session(ANA, "s1")).summary
    assert stored is not None and stored.summary.text == "" and stored.summary.citations == ()
    await summarizing.run(ANA, "s1", "What is the launch code?")
    request = requests[-1]
    assert "KOUROU" not in repr(request)
    assert all(b.kind is not SourceKind.SUMMARY for b in request.sources)


async def test_a_stored_summary_citing_groups_out_of_the_view_is_never_sent_again() -> None:
    """A summary a control record should have restarted but did not (written by an earlier version
    through a runtime without a summarizer) is withheld from the request and restarted by the next
    update, so neither the turn's model nor the summarizer's is sent what it states."""
    store = InMemorySessionStore()
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    await rt.append(
        ANA, "s1", [Message(Role.USER, "The launch code is KOUROU-88."), Message(Role.ASSISTANT, "OK.")]
    )
    for n in range(3):
        await rt.append(ANA, "s1", chatter(n))
    stale = (await store.load(KEY, OpContext())).snapshot.summary
    assert stale is not None and "KOUROU-88" in stale.summary.text
    await rt.reset_view(ANA, "s1", reason="clear")
    # Put the pre-reset summary back, as a writer that did not restart it left it.
    loaded = await store.load(KEY, OpContext())
    sealed = seal_snapshot(attrs.evolve(loaded.snapshot, summary=stale))
    await store.save(KEY, sealed, loaded.revision, OpContext())
    result = await rt.run(ANA, "s1", "What is the launch code?")
    request = requests[-1]
    assert "KOUROU" not in repr(request)
    assert all(b.kind is not SourceKind.SUMMARY for b in request.sources)
    assert any(d.code == "summary_withheld" for d in result.diagnostics)
    # The update after the run restarted it in the store: nothing of it is folded on.
    now = (await rt.inspect_session(ANA, "s1")).summary
    assert now is not None and "KOUROU" not in now.summary.text
    assert all(c.seq >= 5 for c in now.summary.citations)
    await rt.run(ANA, "s1", "And now?")
    assert "KOUROU" not in repr(requests[-1])


class NotesFirst(ExtractiveSummarizer):
    """Writes no text until a group says "go", but notes at once what it is unsure of, quoting it."""

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        summary = await super().summarize(previous, groups, ctx)
        notes = [*(previous.uncertainty if previous is not None else ())]
        notes += [f"unsure about: {m.content}" for g in groups for m in g.messages if "ZEBRA" in m.content]
        if any(m.content == "go" for g in groups for m in g.messages):
            return TaskSummary(summary.text, summary.frontier, summary.citations, uncertainty=notes)
        return TaskSummary("", summary.frontier, uncertainty=notes)


async def test_a_reset_restarts_a_summary_that_has_only_uncertainty_notes() -> None:
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    rt = summary_runtime(NotesFirst(), provider)
    for text in ("The code word is ZEBRA.", "x", "y"):
        await rt.append(ANA, "s1", [Message(Role.USER, text)])
    before = (await rt.inspect_session(ANA, "s1")).summary
    assert before is not None and before.summary.text == "" and before.summary.uncertainty
    reset = await rt.reset_view(ANA, "s1", reason="clear")
    assert any(d.code == "summary_restarted" for d in reset.diagnostics)
    for text in ("go", "z", "w"):
        await rt.append(ANA, "s1", [Message(Role.USER, text)])
    await rt.run(ANA, "s1", "What was cleared?")
    (block,) = [b for b in requests[-1].sources if b.kind is SourceKind.SUMMARY]
    assert "ZEBRA" not in block.content and "ZEBRA" not in str(block.attributes)


async def test_the_summary_block_says_history_before_the_view_was_cleared() -> None:
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    rt = summary_runtime(ExtractiveSummarizer(), provider)
    await rt.append(ANA, "s1", chatter(0))
    await rt.reset_view(ANA, "s1", reason="clear")
    for n in range(1, 6):
        await rt.append(
            ANA,
            "s1",
            [Message(Role.USER, f"Fact {n}: the depot {n} is open."), Message(Role.ASSISTANT, "OK.")],
        )
    await rt.run(ANA, "s1", "Which depots are open?")
    (block,) = [b for b in requests[-1].sources if b.kind is SourceKind.SUMMARY]
    coverage = dict(block.attributes)["coverage"]
    assert "history before group 2 was cleared from the view" in coverage
    assert "chatter" not in block.content


async def test_reset_view_of_a_new_session_creates_it_with_the_reset_only() -> None:
    rt, _ = recall_runtime()
    reset = await rt.reset_view(ANA, "fresh", reason="clear before use")
    assert (reset.seq, reset.view_start, reset.snapshot_revision) == (0, 1, 1)
    await rt.append(ANA, "fresh", chatter(0))
    page = await rt.read_history(ANA, "fresh", max_groups=5)
    assert [m.content for m in page.messages] == ["Unrelated chatter number 0.", "Noted."]


@pytest.mark.parametrize(
    "view",
    [
        {"retracted": 0, "spans": [{"first_seq": 0, "first_index": 1, "last_seq": 1}], "start": 0},
        {"retracted": 1, "spans": [], "start": 0},
        {"retracted": 1, "spans": [{"first_seq": 0, "first_index": 5, "last_seq": 1}], "start": 0},
        {"retracted": 1, "spans": [{"first_seq": 0, "first_index": 1, "last_seq": 0}], "start": 0},
        {"retracted": 0, "spans": [], "start": 9},
        {"retracted": 0, "spans": [], "start": 1},
    ],
)
async def test_an_impossible_view_state_is_corruption(view: dict[str, Any]) -> None:
    from agentium_harness.plugin_api import RetractedSpan, SessionSnapshot, ViewState, seal_snapshot

    store = InMemorySessionStore()
    rt = create_harness_runtime(provider=ExtractiveProvider(), archive=InMemoryArchive(), session_store=store)
    await rt.append(ANA, "s1", chatter(0))
    await rt.retract(ANA, "s1", reason="pop")
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    damaged = seal_snapshot(SessionSnapshot(**{
        **{f: getattr(stored.snapshot, f) for f in ("memory_scope", "boundary", "next_seq", "resident")},
        "view": ViewState(view["start"], [RetractedSpan(**s) for s in view["spans"]], view["retracted"]),
    }))  # fmt: skip
    await store.save(KEY, damaged, stored.revision, OpContext())
    with pytest.raises(SnapshotCorruptError, match="impossible"):
        await rt.read_history(ANA, "s1", max_groups=5)
    with pytest.raises(SnapshotCorruptError):
        await rt.run(ANA, "s1", "hello")


async def test_the_history_api_on_the_sqlite_pair(tmp_path: Path) -> None:
    """The SQLite archive and store commit in one transaction; the view rides in the same snapshot."""
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    rt = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    try:
        for n in range(5):
            await rt.append(ANA, "s1", chatter(n), expected_revision=n)
        popped = await rt.retract(ANA, "s1", count=3, reason="undo")
        assert [m.content for m in popped.messages] == ["Noted.", "Unrelated chatter number 4.", "Noted."]
        page = await rt.read_history(ANA, "s1", max_groups=10)
        assert [m.content for m in page.messages][-3:] == [
            "Unrelated chatter number 2.",
            "Noted.",
            "Unrelated chatter number 3.",
        ]
        assert page.boundary > 0  # part of it was read from the archive
        await rt.reset_view(ANA, "s1", reason="clear")
        await rt.run(ANA, "s1", "fresh start")
        assert requests[-1].history == ()
        assert (await rt.list_sessions(ANA, limit=5)).sessions == ("s1",)
        audit = await rt.read_history(ANA, "s1", max_groups=100, view=False)
        assert len(audit.groups) == 8 and audit.next_before_seq is None
    finally:
        await archive.aclose()
        await store.aclose()


# -- the bound on retracted spans (MAX_RETRACTION_SPANS) ---------------------------------------------


def _say(role: Role, text: str) -> list[Message]:
    return [Message(role, text)]


async def _stored_size(store: InMemorySessionStore) -> tuple[int, int, int]:
    """``(revision, snapshot bytes, spans in the view)`` of session s1 as stored."""
    from agentium_harness.plugin_api import snapshot_bytes

    stored = await store.load(KEY, OpContext())
    assert stored is not None
    view = stored.snapshot.view
    return stored.revision, len(snapshot_bytes(stored.snapshot)), len(view.spans) if view else 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # thousands of operations: one backend is enough
async def test_retracted_spans_stay_bounded_when_a_host_adds_two_and_pops_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each pop after a message still in view adds a span; the view never holds more than the limit.

    A host that regenerates answers (add a question and an answer, pop the
    answer) adds a span per cycle. Without the bound the snapshot grew with
    every cycle (and every save rewrote it); with it, the retraction that
    would pass the limit is refused and the host resets the view.
    """
    from agentium_harness import RetractionLimitError
    from agentium_harness._engine import history_checks

    monkeypatch.setattr(history_checks, "MAX_RETRACTION_SPANS", 20)
    store = InMemorySessionStore()
    rt = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=4)),
    )
    resets, largest = 0, 0
    for n in range(630):
        await rt.append(ANA, "s1", _say(Role.USER, f"question {n}"))
        await rt.append(ANA, "s1", _say(Role.ASSISTANT, f"answer {n}"))
        try:
            await rt.retract(ANA, "s1", reason="regenerate")
        except RetractionLimitError as exc:
            assert (exc.spans, exc.limit) == (20, 20)
            await rt.reset_view(ANA, "s1", reason="too many pops")
            resets += 1
        if n % 10 == 9:
            _, size, spans = await _stored_size(store)
            assert spans <= 20
            largest = max(largest, size)
    assert resets == 630 // 21  # one refusal every 21 cycles: 20 spans, then a reset
    # 20 spans of about 50 bytes, 4 resident groups and the bookkeeping: far below what
    # 630 spans (over 30 KB) would take.
    assert largest < 8 * 1024, largest
    await rt.aclose()


async def test_a_retraction_past_the_span_limit_is_refused_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused with nothing written; joining the last span is still made; an old, larger view loads."""
    from agentium_harness import CommitState, MessageRef, RetractionLimitError
    from agentium_harness._engine import history_checks

    store = InMemorySessionStore()
    rt = create_harness_runtime(provider=ExtractiveProvider(), archive=InMemoryArchive(), session_store=store)
    for n in range(3):  # three spans, written under the default limit
        await rt.append(ANA, "s1", _say(Role.USER, f"question {n}"))
        await rt.append(ANA, "s1", _say(Role.ASSISTANT, f"answer {n}"))
        await rt.retract(ANA, "s1", reason="regenerate")
    await rt.append(ANA, "s1", _say(Role.USER, "question 3"))
    await rt.append(ANA, "s1", _say(Role.ASSISTANT, "answer 3"))
    # A lower limit now: the stored view holds more spans than it allows, and still loads.
    monkeypatch.setattr(history_checks, "MAX_RETRACTION_SPANS", 2)
    before = await _stored_size(store)
    assert before[2] == 3
    page = await rt.read_history(ANA, "s1", max_groups=20)
    assert [m.content for m in page.messages] == [f"question {n}" for n in range(3)] + [
        "question 3",
        "answer 3",
    ]
    with pytest.raises(RetractionLimitError, match="reset_view") as refused:
        await rt.retract(ANA, "s1", reason="regenerate")
    assert (refused.value.spans, refused.value.limit) == (3, 2)
    assert refused.value.commit_state is CommitState.NOT_COMMITTED
    assert await _stored_size(store) == before  # nothing written
    audit = await rt.read_history(ANA, "s1", max_groups=50, view=False)
    assert audit.groups[-1].group.messages[0].content == "answer 3"
    # Taking both messages joins the span before them (no span is added): made, even over the limit.
    joined = await rt.retract(ANA, "s1", count=2, reason="undo the turn")
    assert joined.retracted == (MessageRef(9, 0), MessageRef(10, 0))
    assert (await _stored_size(store))[2] == 3
    # reset_view starts the view with no span; retractions are made again.
    await rt.reset_view(ANA, "s1", reason="start over")
    assert (await _stored_size(store))[2] == 0
    await rt.append(ANA, "s1", _say(Role.USER, "question 4"))
    await rt.append(ANA, "s1", _say(Role.ASSISTANT, "answer 4"))
    await rt.retract(ANA, "s1", reason="regenerate")
    page = await rt.read_history(ANA, "s1", max_groups=20)
    assert [m.content for m in page.messages] == ["question 4"]
    await rt.aclose()


class HoldsBackTheNewest(ExtractiveSummarizer):
    """Folds all but the newest group it is given (a frontier below it), writing every group it read."""

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        lines = previous.text.splitlines() if previous is not None and previous.text else []
        lines += [m.content for g in groups for m in g.messages if m.role is Role.USER]
        start = previous.frontier if previous is not None else groups[0].seq
        return TaskSummary("\n".join(dict.fromkeys(lines)), frontier=max(start, groups[-1].seq))


async def test_a_retraction_of_a_group_given_past_the_frontier_restarts_the_summary() -> None:
    rt = summary_runtime(HoldsBackTheNewest())
    await rt.append(ANA, "s1", chatter(0))
    await rt.append(ANA, "s1", chatter(1))
    await rt.append(
        ANA, "s1", [Message(Role.USER, "The launch code is KOUROU-88."), Message(Role.ASSISTANT, "OK.")]
    )
    await rt.append(ANA, "s1", chatter(3))
    await rt.append(ANA, "s1", chatter(4))
    before = (await rt.inspect_session(ANA, "s1")).summary
    # Given groups 1 and 2, it folded 1: the text states group 2, at the frontier.
    assert before is not None and before.summary.frontier == 2 and "KOUROU-88" in before.summary.text
    done = await rt.retract(ANA, "s1", count=6, reason="undo back to the launch code")
    assert done.retracted[0].seq == 2
    assert any(d.code == "summary_restarted" for d in done.diagnostics)
    after = (await rt.inspect_session(ANA, "s1")).summary
    assert after is not None and "KOUROU-88" not in after.summary.text


async def test_a_legacy_summary_stating_a_group_retracted_past_its_frontier_is_withheld() -> None:
    """A state saved before ``given_until`` existed, whose text states a group retracted past its frontier.

    An earlier version restarted the summary only for a retraction below its
    frontier, and kept this state (it had no ``given_until``): its text
    states group 2, out of the view now, and it cites nothing out of the view
    (a summary cites only groups below its frontier), so the citation check
    alone never withheld it. Read as such a state may state any archived
    group, it is withheld and restarted.
    """
    store = InMemorySessionStore()
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        summarizer=HoldsBackTheNewest(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    await rt.append(ANA, "s1", chatter(0))
    await rt.append(ANA, "s1", chatter(1))
    await rt.append(
        ANA, "s1", [Message(Role.USER, "The launch code is KOUROU-88."), Message(Role.ASSISTANT, "OK.")]
    )
    await rt.append(ANA, "s1", chatter(3))
    await rt.append(ANA, "s1", chatter(4))
    before = (await store.load(KEY, OpContext())).snapshot.summary
    assert before is not None and before.summary.frontier == 2 and "KOUROU-88" in before.summary.text
    await rt.retract(ANA, "s1", count=6, reason="undo back to the launch code")
    # Put the state back as the earlier version left it: not restarted, and without the field.
    loaded = await store.load(KEY, OpContext())
    legacy = attrs.evolve(before, given_until=None)
    await store.save(
        KEY, seal_snapshot(attrs.evolve(loaded.snapshot, summary=legacy)), loaded.revision, OpContext()
    )
    result = await rt.run(ANA, "s1", "What is the launch code?")
    request = requests[-1]
    assert "KOUROU" not in repr(request)
    assert all(b.kind is not SourceKind.SUMMARY for b in request.sources)
    assert any(d.code == "summary_withheld" for d in result.diagnostics)
    after = (await store.load(KEY, OpContext())).snapshot.summary
    assert after is not None and "KOUROU" not in after.summary.text
    await rt.aclose()


async def test_a_summary_of_erased_then_retracted_groups_moves_on_without_restarting_every_turn() -> None:
    """The engine's note on groups erased before they were summarized is not a legacy summary's words.

    A summary begun with that note only (no summarizer words) over a long
    retracted span must not be taken for a state an earlier version left
    (no ``given_until``, words that may state the span): it would be
    withheld and restarted on every turn, never passing the span.
    """
    archive, store = InMemoryArchive(), InMemorySessionStore()
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=2))
    plain = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=limits,
        retention=RetentionPolicy(max_archived_groups=4),
    )
    for n in range(6):
        await plain.append(ANA, "s1", chatter(n))
    await plain.retract(ANA, "s1", count=8, reason="undo groups 2 to 5")
    for n in range(6, 9):
        await plain.append(ANA, "s1", chatter(n))
    done = await plain.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
    assert done.erasures, done
    await plain.aclose()
    rt = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False, max_groups=1),
        limits=limits,
    )
    frontiers = []
    for n in range(4):
        result = await rt.run(ANA, "s1", f"Turn {n}.")
        assert not any(d.code == "summary_withheld" for d in result.diagnostics), result.diagnostics
        state = (await store.load(KEY, OpContext())).snapshot.summary
        assert state is not None
        frontiers.append(state.summary.frontier)
    assert frontiers == sorted(frontiers) and frontiers[-1] > frontiers[0], frontiers
    await rt.aclose()
