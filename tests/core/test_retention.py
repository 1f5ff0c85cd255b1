"""Retention (issue 23, item 5): archived groups past the policy leave only when the host applies it.

Each application goes through the erasure path and leaves a tombstone per
session trimmed; the session lives on, its summary keeps its text and marks
the citations of erased groups, and later turns, summaries, reads and the
recall index's catch-up pass over the erased groups.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import attrs
import pytest

from agentium_harness import (
    AgentiumError,
    CommitState,
    ContractViolationError,
    EraseTarget,
    ErasureInProgressError,
    ErasureKind,
    ErasureRefusedError,
    ErasureState,
    GroupRef,
    InvalidArgumentError,
    MemoryFact,
    MemoryScope,
    Message,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RetractionRefusedError,
    Role,
    RuntimeLimits,
    SeqRange,
    SessionKey,
    SessionStoreError,
    SnapshotCorruptError,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import retention as retention_module
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import ErasedSession, EraseReport, EraseStatus, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))
KEY = SessionKey("acme", "ana", "s1")


def _runtime(policy: RetentionPolicy | None, **kw: Any) -> Any:
    archive, recall = InMemoryArchive(), InMemoryRecallStore()
    rt = create_harness_runtime(
        provider=kw.pop("provider", None) or ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=kw.pop("session_store", None) or InMemorySessionStore(),
        recall=recall,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=policy,
    )
    return rt, archive, recall


async def _archived(archive: InMemoryArchive) -> list[int]:
    return [g.seq for g in await archive.read_groups(KEY, 0, 100, OpContext())]


async def test_a_count_policy_erases_the_oldest_archived_groups_when_applied_and_not_before() -> None:
    rt, archive, recall = _runtime(RetentionPolicy(max_archived_groups=2))
    for i in range(6):  # groups 0-4 archived and summarized, 5 resident
        await rt.run(ANA, "s1", f"fact number {i} about the harbour")
    assert await _archived(archive) == [0, 1, 2, 3, 4]  # a turn never applies retention
    before = await rt.inspect_session(ANA, "s1")
    assert before.summary is not None and before.summary.summary.text

    plan = await rt.apply_retention(OPERATOR, dry_run=True)
    assert [e.state for e in plan.erasures] == [ErasureState.PLANNED] and await _archived(archive) == [
        0,
        1,
        2,
        3,
        4,
    ]

    result = await rt.apply_retention(OPERATOR)
    (erasure,) = result.erasures
    record = erasure.tombstone
    assert record is not None and record.kind is ErasureKind.RETENTION and result.checked == 1
    assert record.target.groups == (SeqRange(0, 3),)
    assert [s.ranges for s in record.sessions] == [(SeqRange(0, 3),)]
    assert await _archived(archive) == [3, 4]
    assert sorted(s.seq for s in recall._sources.values() if s.seq is not None) == [3, 4]
    view = await rt.inspect_session(ANA, "s1")
    assert view.erased == (SeqRange(0, 3),) and view.resident_seqs == before.resident_seqs
    # The summary keeps its text and says which citations are of erased groups.
    assert view.summary is not None and view.summary.summary.text == before.summary.summary.text
    cited = {c.seq for c in view.summary.summary.citations}
    assert set(view.summary.erased_citations or ()) == {s for s in cited if s < 3} != set()
    # Applying again with nothing new past the policy leaves no new tombstone.
    assert (await rt.apply_retention(OPERATOR)).erasures == ()
    # Later turns, summaries and reads go on over the erased groups.
    provider_result = await rt.run(ANA, "s1", "and another fact")
    assert provider_result.committed
    assert not any(d.code == "recall_index_behind" for d in provider_result.diagnostics)
    page = await rt.read_history(ANA, "s1", max_groups=50, view=False)
    assert [g.seq for g in page.groups] == [3, 4, 5, 6]
    await rt.aclose()


async def test_an_age_policy_erases_what_was_archived_before_the_cutoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt, archive, _ = _runtime(RetentionPolicy(max_age_days=1.0 / 86_400))  # one second
    for i in range(3):
        await rt.run(ANA, "s1", f"old turn {i}")  # archives 0 and 1
    await anyio.sleep(0.05)
    between = datetime.now(UTC)  # after the old groups' archive marks, before the new ones'
    await anyio.sleep(0.05)
    for i in range(2):
        await rt.run(ANA, "s1", f"new turn {i}")  # archives 2 and 3 now
    # Ages are measured from one second (the policy's age) past ``between``: exactly the old groups
    # are too old. On the real clock, a loaded machine taking over a second for the new turns and
    # the listing aged group 2 out as well.
    monkeypatch.setattr(retention_module, "now_utc", lambda: between + timedelta(seconds=1))
    started = time.monotonic()
    result = await rt.apply_retention(OPERATOR)
    assert time.monotonic() - started < 60
    (erasure,) = result.erasures
    assert erasure.record.target.groups == (SeqRange(0, 2),)
    assert await _archived(archive) == [2, 3]
    await rt.aclose()


async def test_retention_needs_a_policy_and_stays_within_the_operators_tenant() -> None:
    rt, _, _ = _runtime(None)
    with pytest.raises(InvalidArgumentError, match="retention"):
        await rt.apply_retention(OPERATOR)
    await rt.aclose()
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy()
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy(max_age_days=0)
    rt, _, _ = _runtime(RetentionPolicy(max_archived_groups=1))
    with pytest.raises(ErasureRefusedError):
        await rt.apply_retention(OPERATOR, EraseTarget.user("globex", "ana"))
    await rt.aclose()


async def test_a_retraction_after_retention_takes_the_views_messages_and_skips_the_erased_groups() -> None:
    # The retraction looked up the view's last messages without skipping the erased groups, and
    # failed with a false ArchiveCorruptError once it reached one.
    rt, _, _ = _runtime(RetentionPolicy(max_archived_groups=1))
    for i in range(5):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    await rt.apply_retention(OPERATOR)
    page = await rt.read_history(ANA, "s1", max_groups=10)
    assert [m.content for m in page.messages] == ["q3", "a3", "q4", "a4"]
    with pytest.raises(RetractionRefusedError) as refused:
        await rt.retract(ANA, "s1", count=5, reason="too many")
    assert refused.value.available == 4
    taken = await rt.retract(ANA, "s1", count=3, reason="pop three")
    assert [m.content for m in taken.messages] == ["a3", "q4", "a4"]
    assert [m.content for m in (await rt.read_history(ANA, "s1", max_groups=10)).messages] == ["q3"]


class _DamagedStore(InMemorySessionStore):
    """A session store whose snapshot of one session cannot be decoded (damaged on disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.damaged: str | None = None

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.session == self.damaged:
            raise SnapshotCorruptError(f"snapshot of session {key.key()} cannot be decoded")
        return await super().load(key, ctx)


async def test_a_damaged_session_is_passed_over_and_the_others_are_still_trimmed() -> None:
    # apply_retention raised the damaged session's SnapshotCorruptError ("nothing was changed")
    # after trimming the sessions listed before it, and never reached those after it.
    store = _DamagedStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for sid in ("s1", "s2", "s3"):
        for i in range(4):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    store.damaged = "s2"
    result = await rt.apply_retention(OPERATOR)
    assert result.checked == 3
    assert [e.record.target.session_id for e in result.erasures] == ["s1", "s3"]
    assert all(e.tombstone is not None for e in result.erasures)
    (note,) = result.notes
    assert "acme/ana/s2" in note and "SnapshotCorruptError" in note and "cannot be decoded" not in note
    for sid in ("s1", "s3"):
        assert [
            g.seq for g in await archive.read_groups(SessionKey("acme", "ana", sid), 0, 100, OpContext())
        ] == [2]
    await rt.aclose()


async def test_a_count_policy_keeps_that_many_stored_groups_when_some_were_erased_before() -> None:
    # The cutoff was boundary - max_archived_groups: groups erased earlier (a forgotten fact's
    # sources) counted as kept, so retention erased groups the policy says to keep.
    archive = InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=3),
    )
    for i in range(10):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    assert await _archived(archive) == list(range(9))
    groups = await archive.read_groups(KEY, 5, 2, OpContext())
    scope = MemoryScope("acme", "ana")
    fact = MemoryFact(scope, "a fact", provenance=[GroupRef("s1", g.seq, g.digest) for g in groups])
    ack = await rt.memory.remember(fact)
    assert ack.fact_id is not None
    await rt.forget(scope, ack.fact_id, erase_sources=True, reason="asked", attestation=OPERATOR)
    assert await _archived(archive) == [0, 1, 2, 3, 4, 7, 8]
    (erasure,) = (await rt.apply_retention(OPERATOR)).erasures
    assert erasure.record.target.groups == (SeqRange(0, 4),)
    assert await _archived(archive) == [4, 7, 8]  # the newest three stored groups
    await rt.aclose()


class _ListingStore(InMemorySessionStore):
    """A session store whose dry-run erase (retention's listing of a tenant) lists what ``listed`` says."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[SessionKey] | None = None

    async def erase(self, target: Any, ctx: Any, **kw: Any) -> Any:
        report = await super().erase(target, ctx, **kw)
        if self.listed is None or not kw.get("dry_run"):
            return report
        return EraseReport(sessions=[ErasedSession(k) for k in self.listed])


async def _listed_runtime() -> tuple[Any, InMemoryArchive, _ListingStore]:
    store = _ListingStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for i in range(3):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    return rt, archive, store


async def test_a_tenant_listing_past_its_bound_is_refused_and_nothing_is_erased() -> None:
    # The dry-run erase that lists a tenant's sessions was taken unchecked: a store listing more
    # sessions than the call's max_items had every one of them loaded and trimmed (unbounded work).
    rt, archive, store = await _listed_runtime()
    extra = [SessionKey("acme", "ana", f"x{i}") for i in range(retention_module.MAX_RETENTION_SESSIONS)]
    store.listed = [KEY, *extra]
    with anyio.fail_after(30), pytest.raises(ContractViolationError, match="bounded to 10000"):
        await rt.apply_retention(OPERATOR)
    assert await _archived(archive) == [0, 1]
    await rt.aclose()


async def test_a_tenant_listing_naming_a_session_twice_plans_one_erasure() -> None:
    rt, archive, store = await _listed_runtime()
    store.listed = [KEY, KEY]
    plan = await rt.apply_retention(OPERATOR, dry_run=True)
    assert plan.checked == 1 and [e.state for e in plan.erasures] == [ErasureState.PLANNED]
    assert await _archived(archive) == [0, 1]
    await rt.aclose()


async def test_a_tenant_listing_naming_another_tenants_session_is_refused() -> None:
    rt, archive, store = await _listed_runtime()
    store.listed = [KEY, SessionKey("other", "ana", "s1")]
    with pytest.raises(ContractViolationError, match="outside"):
        await rt.apply_retention(OPERATOR, dry_run=True)
    assert await _archived(archive) == [0, 1]
    await rt.aclose()


class _DoublingStore(InMemorySessionStore):
    """A session store whose user listing names each session twice (not the ascending ids it owes)."""

    async def list_sessions(self, tenant: str, user: str, limit: int, ctx: Any, after: Any = None) -> Any:
        ids = await super().list_sessions(tenant, user, limit, ctx, after=after)
        return [sid for sid in ids for _ in range(2)]


async def test_a_user_listing_not_in_ascending_order_is_refused_and_nothing_is_erased() -> None:
    # Only the page's first id was checked against the cursor: a page naming a session twice had it
    # trimmed twice over (checked counted 2) and a page out of order could be read again and again.
    store = _DoublingStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for i in range(3):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    with pytest.raises(ContractViolationError, match="ascending"):
        await rt.apply_retention(OPERATOR, EraseTarget.user("acme", "ana"))
    assert await _archived(archive) == [0, 1]
    await rt.aclose()


class _FailingStore(InMemorySessionStore):
    """A session store whose backend fails to load one session (``failing``)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: str | None = None

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.session == self.failing:
            raise SessionStoreError("backend down")
        return await super().load(key, ctx)


@pytest.mark.parametrize(
    ("failing", "state"), [("s1", CommitState.NOT_COMMITTED), ("s2", CommitState.UNKNOWN)]
)
async def test_a_typed_failure_part_way_says_sessions_were_trimmed_before_it(
    failing: str, state: CommitState
) -> None:
    # A store's typed error on the second session's load went out as it stood ("backend down",
    # commit_state None) once the first session was trimmed: nothing said anything was erased.
    store = _FailingStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for sid in ("s1", "s2"):
        for i in range(3):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    store.failing = failing
    with pytest.raises(SessionStoreError, match="backend down") as caught:
        await rt.apply_retention(OPERATOR)
    assert caught.value.commit_state is state
    trimmed = state is CommitState.UNKNOWN
    assert ("the sessions trimmed before stay trimmed" in str(caught.value)) is trimmed
    assert await _archived(archive) == ([1] if trimmed else [0, 1])
    await rt.aclose()


class _RecordFailingStore(InMemorySessionStore):
    """A session store whose loads of erasure records fail (a bare RuntimeError) once ``failing`` loads."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: str | None = None
        self.armed = False

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.tenant == "acme" and key.session == self.failing:
            self.armed = True
        elif self.armed and key.tenant != "acme":  # the erasure's look for a pending record, before any write
            raise RuntimeError("records backend down")
        return await super().load(key, ctx)


@pytest.mark.parametrize(("failing", "trimmed"), [("s1", False), ("s2", True)])
async def test_an_erasure_failing_before_it_wrote_says_what_the_call_erased(
    failing: str, trimmed: bool
) -> None:
    # The erasure's own wording ("this call erased nothing (commit_state not_committed)") went out
    # beside retention's once s1 was trimmed; and a first erasure that wrote nothing was "unknown".
    store = _RecordFailingStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for sid in ("s1", "s2"):
        for i in range(3):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    store.failing = failing
    with anyio.fail_after(30), pytest.raises(AgentiumError, match="records backend down") as caught:
        await rt.apply_retention(OPERATOR)
    said = str(caught.value)
    if trimmed:
        assert caught.value.commit_state is CommitState.UNKNOWN
        assert "the sessions trimmed before stay trimmed" in said and "not_committed" not in said
        assert "erased nothing" not in said
    else:
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert "unknown" not in said and "trimmed before" not in said
    assert await _archived(archive) == ([1] if trimmed else [0, 1])
    await rt.aclose()


class _TypedRecordFailingStore(_RecordFailingStore):
    """As :class:`_RecordFailingStore`, the records' backend failing with a typed error instead."""

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        try:
            return await super().load(key, ctx)
        except RuntimeError as exc:
            raise SessionStoreError(str(exc)) from exc


@pytest.mark.parametrize(("failing", "trimmed"), [("s1", False), ("s2", True)])
async def test_an_erasure_refused_typed_before_it_wrote_says_what_the_call_erased(
    failing: str, trimmed: bool
) -> None:
    # A typed error (no commit_state of its own) out of the first erasure, before it wrote anything,
    # left the call "unknown": "the sessions trimmed before stay trimmed", though none was.
    store = _TypedRecordFailingStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for sid in ("s1", "s2"):
        for i in range(3):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    store.failing = failing
    with anyio.fail_after(30), pytest.raises(SessionStoreError, match="records backend down") as caught:
        await rt.apply_retention(OPERATOR)
    said = str(caught.value)
    if trimmed:
        assert caught.value.commit_state is CommitState.UNKNOWN
        assert "the sessions trimmed before stay trimmed" in said and "not_committed" not in said
    else:
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert "unknown" not in said and "trimmed before" not in said
    assert await _archived(archive) == ([1] if trimmed else [0, 1])
    await rt.aclose()


class _RefusingRecordsStore(InMemorySessionStore):
    """Each session's erasure refused typed by the records' backend: ``refusals[session]`` is raised."""

    def __init__(self, refusals: dict[str, Exception]) -> None:
        super().__init__()
        self.refusals = refusals
        self.checking: str | None = None
        self.armed = False

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.tenant == "acme":
            self.checking = key.session
        elif self.armed and self.checking in self.refusals:
            # The first read of the records after the session's own load: its erasure's look for a
            # pending record, before any write (the next session's check reads them before its load).
            checking, self.checking = self.checking, None
            raise self.refusals[checking]
        return await super().load(key, ctx)


async def test_a_call_whose_erasures_were_all_refused_before_writing_says_nothing_was_trimmed() -> None:
    # The first session's erasure refused (passed over: an overlapping erasure) left the call
    # "unknown"; the next one's typed error then said "the sessions trimmed before stay trimmed".
    store = _RefusingRecordsStore(
        {
            "s1": ErasureInProgressError("an overlapping erasure is pending; nothing was erased", "e-1"),
            "s2": SessionStoreError("records backend down"),
        }
    )
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for sid in ("s1", "s2"):
        for i in range(3):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    store.armed, store.checking = True, None
    with anyio.fail_after(30), pytest.raises(SessionStoreError, match="records backend down") as caught:
        await rt.apply_retention(OPERATOR)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert "unknown" not in str(caught.value) and "trimmed before" not in str(caught.value)
    for sid in ("s1", "s2"):
        key = SessionKey("acme", "ana", sid)
        assert [g.seq for g in await archive.read_groups(key, 0, 100, OpContext())] == [0, 1]
    await rt.aclose()


class _BadIdStore(InMemorySessionStore):
    """A session store whose user listing ends with an id no session key holds."""

    async def list_sessions(self, tenant: str, user: str, limit: int, ctx: Any, after: Any = None) -> Any:
        return [*await super().list_sessions(tenant, user, limit, ctx, after=after), "z\x00"]


async def test_a_user_listing_naming_an_id_no_session_has_is_refused_and_nothing_is_erased() -> None:
    # It went out as InvalidIdError ("invalid session"): the host's fault by its type, the store's in fact.
    store = _BadIdStore()
    rt, archive, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for i in range(3):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    with pytest.raises(ContractViolationError, match="no session key holds"):
        await rt.apply_retention(OPERATOR, EraseTarget.user("acme", "ana"))
    assert await _archived(archive) == [0, 1]
    await rt.aclose()


class _PartialListingStore(_ListingStore):
    """A store whose tenant listing stops part way (partial), as SQLite's does at its read budget."""

    async def erase(self, target: Any, ctx: Any, **kw: Any) -> Any:
        report = await super().erase(target, ctx, **kw)
        return attrs.evolve(report, status=EraseStatus.PARTIAL) if kw.get("dry_run") else report


async def test_a_tenant_listing_that_stops_part_way_is_not_said_to_be_over_the_bound() -> None:
    # The note said "more than 10000 sessions" for a store that listed one session and said partial.
    store = _PartialListingStore()
    rt, _, _ = _runtime(RetentionPolicy(max_archived_groups=1), session_store=store)
    for i in range(3):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
    store.listed = [KEY]
    plan = await rt.apply_retention(OPERATOR, dry_run=True)
    assert plan.checked == 1 and len(plan.notes) == 1
    assert "more than" not in plan.notes[0] and "apply retention again" in plan.notes[0]
    await rt.aclose()
