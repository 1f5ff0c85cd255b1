"""``append(after_read=...)``: a write made from a read is never committed into a session erased since.

A host under an agent loop reads the session (the model's input), waits on
the model, then appends the turn. If an erasure of the session (or of its
user or tenant) began and finished while the model ran, the append's own
load finds the session simply empty: without the read's fence point it
would write the turn, made from the erased history, into the erased id.

Two runtimes over the same stores (in memory, or one SQLite file) stand for
the two processes: ``host`` reads and appends, ``other`` erases.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness import (
    BlockingRuntime,
    CommitState,
    ErasedSinceReadError,
    EraseTarget,
    HistoryPage,
    InvalidArgumentError,
    Message,
    OperatorAttestation,
    ReadFence,
    Role,
    SessionConflictError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext, SessionKey

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
ZED = VerifiedIdentity("globex", "zed", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
GLOBEX_OPERATOR = OperatorAttestation(VerifiedIdentity("globex", "ops", "sso"), "dsr")
#: The turn made from the read: none of it may be found in an erased session afterwards.
TURN = [Message(Role.USER, "and the second secret qzturnq?"), Message(Role.ASSISTANT, "it is qzanswerq")]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@attrs.define
class Pair:
    host: Any
    other: Any
    store: Any  # the host's session store, read directly to see what was written


@pytest.fixture(params=["memory", "sqlite"])
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    def runtime(archive: Any, store: Any) -> Any:
        return create_harness_runtime(
            provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
        )

    if request.param == "memory":
        archive, store = InMemoryArchive(), InMemorySessionStore()
        made = Pair(runtime(archive, store), runtime(archive, store), store)
    else:
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        store = SQLiteSessionStore(config)
        made = Pair(
            runtime(SQLiteArchive(config), store),
            runtime(SQLiteArchive(config), SQLiteSessionStore(config)),
            store,
        )
    try:
        yield made
    finally:
        await made.host.aclose()
        await made.other.aclose()


async def _stored(pair: Pair, who: VerifiedIdentity, session: str) -> object:
    """What the session store holds for the session, read directly (``None``: nothing)."""
    return await pair.store.load(SessionKey.of(who, session), OpContext())


async def _texts(runtime: Any, who: VerifiedIdentity, session: str) -> list[str]:
    page = await runtime.read_history(who, session, max_groups=100, view=False)
    return [m.content for g in page.groups for m in g.messages]


def _erasure(level: str) -> EraseTarget:
    if level == "session":
        return EraseTarget.session("acme", "ana", "s1")
    return EraseTarget.user("acme", "ana") if level == "user" else EraseTarget.tenant("acme")


@pytest.mark.parametrize("level", ["session", "user", "tenant"])
@pytest.mark.parametrize("given", ["page", "fence"])
async def test_an_append_after_a_read_is_refused_when_the_session_was_erased_since(
    pair: Pair, level: str, given: str, caplog: pytest.LogCaptureFixture
) -> None:
    await pair.host.append(ANA, "s1", [Message(Role.USER, "first secret qzfirstq")])
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    assert [m.content for m in page.messages] == ["first secret qzfirstq"]
    assert isinstance(page.read_fence, ReadFence) and "qz" not in repr(page.read_fence)
    # The model runs; meanwhile another process erases the session completely.
    done = await pair.other.erase(_erasure(level), reason="dsr", attestation=OPERATOR)
    assert done.tombstone is not None
    caplog.set_level(logging.WARNING)
    after = page if given == "page" else page.read_fence
    with pytest.raises(ErasedSinceReadError) as caught:
        await pair.host.append(ANA, "s1", TURN, after_read=after)
    assert isinstance(caught.value, SessionConflictError)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert "read the session again" in str(caught.value)
    # Nothing written: the erased session stays absent, in the store itself.
    assert await _stored(pair, ANA, "s1") is None
    assert await _texts(pair.other, ANA, "s1") == []
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "not committed" in r.getMessage()]
    assert warned and warned[0].getMessage().startswith("append not committed")
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log


async def test_an_erased_session_never_read_before_refuses_too(pair: Pair) -> None:
    """The read found nothing (a new session), and an erasure of it ran before the append."""
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    assert page.groups == () and page.read_fence is not None
    await pair.other.erase(_erasure("user"), reason="dsr", attestation=OPERATOR)
    with pytest.raises(ErasedSinceReadError):
        await pair.host.append(ANA, "s1", TURN, after_read=page)
    assert await _stored(pair, ANA, "s1") is None


async def test_an_append_after_a_read_commits_when_no_erasure_ran(pair: Pair) -> None:
    await pair.host.append(ANA, "s1", [Message(Role.USER, "first")])
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    await pair.other.append(ANA, "s1", [Message(Role.USER, "a concurrent write")])  # not an erasure
    done = await pair.host.append(ANA, "s1", TURN, after_read=page)
    assert done.seq == 2 and done.commit_state is CommitState.COMMITTED
    # The same fence again (the SDK's next add_items of the turn): still no erasure, still committed.
    again = await pair.host.append(ANA, "s1", TURN, after_read=page.read_fence)
    assert again.seq == 3


@pytest.mark.parametrize("where", ["another tenant", "same tenant"])
async def test_an_erasure_of_an_unrelated_session_does_not_refuse(pair: Pair, where: str) -> None:
    """Another user's session erased meanwhile (in another tenant, or in this one): the append commits."""
    who, operator = (ZED, GLOBEX_OPERATOR) if where == "another tenant" else (BOB, OPERATOR)
    await pair.host.append(who, "s9", [Message(Role.USER, "someone else")])
    await pair.host.append(ANA, "s1", [Message(Role.USER, "first")])
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    target = EraseTarget.session(who.tenant, who.user, "s9")
    await pair.other.erase(target, reason="dsr", attestation=operator)
    done = await pair.host.append(ANA, "s1", TURN, after_read=page)
    assert done.seq == 1
    assert await _texts(pair.host, ANA, "s1") == ["first", *(m.content for m in TURN)]


@pytest.mark.parametrize("level", ["session", "user"])
async def test_an_erasure_finished_before_the_read_does_not_refuse(pair: Pair, level: str) -> None:
    """The session (or its user) erased *before* the read, then used again; another user's erasure in the
    tenant runs between the read and the append: only an erasure that joined after the read refuses it."""
    await pair.host.append(ANA, "s1", [Message(Role.USER, "old secret qzoldq")])
    await pair.other.erase(_erasure(level), reason="dsr", attestation=OPERATOR)
    await pair.host.append(ANA, "s1", [Message(Role.USER, "first after the erasure")])
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    await pair.host.append(BOB, "s9", [Message(Role.USER, "someone else")])
    await pair.other.erase(EraseTarget.session("acme", "bob", "s9"), reason="dsr", attestation=OPERATOR)
    await pair.host.append(ANA, "s1", TURN, after_read=page)
    assert await _texts(pair.host, ANA, "s1") == ["first after the erasure", *(m.content for m in TURN)]


async def test_bad_after_read_is_refused_with_nothing_written(pair: Pair) -> None:
    await pair.host.append(ANA, "s1", [Message(Role.USER, "first")])
    await pair.host.append(ANA, "s2", [Message(Role.USER, "other session")])
    await pair.host.append(BOB, "s1", [Message(Role.USER, "bob's")])
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    other_session = await pair.host.read_history(ANA, "s2", max_groups=10)
    other_user = await pair.host.read_history(BOB, "s1", max_groups=10)
    other_tenant = await pair.host.read_history(ZED, "s1", max_groups=10)
    hand_made = attrs.evolve(page, read_fence=None)
    forged = ReadFence("acme", "ana", "s1", ("7",))  # type: ignore[arg-type]
    before = await _stored(pair, ANA, "s1")
    bad: list[object] = [
        "a page",
        {"read_fence": page.read_fence},
        page.snapshot_revision,
        page.groups,
        hand_made,
        forged,
        other_session,
        other_session.read_fence,
        other_user,
        other_tenant.read_fence,
    ]
    for value in bad:
        with pytest.raises(InvalidArgumentError) as caught:
            await pair.host.append(ANA, "s1", TURN, after_read=value)  # type: ignore[arg-type]
        assert "nothing was written" in str(caught.value), value
        assert await _stored(pair, ANA, "s1") == before, value
    assert isinstance(hand_made, HistoryPage)
    assert await _texts(pair.host, ANA, "s1") == ["first"]


class _Liar(str):
    """An id that says it equals any other: it must not pass for this session's."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


class _OwnPage(HistoryPage):
    """A page of the host's own type, whose code runs when its fence is read."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        if name == "read_fence":
            raise KeyError(name)
        return object.__getattribute__(self, name)


async def test_a_page_or_fence_of_the_hosts_own_making_is_refused_typed(pair: Pair) -> None:
    """Only what read_history made: no subclass's code runs, no id of another type passes for this one."""
    await pair.host.append(ANA, "s1", [Message(Role.USER, "first")])
    page = await pair.host.read_history(ANA, "s1", max_groups=10)
    assert page.read_fence is not None
    own_page = _OwnPage(*(getattr(page, f.name) for f in attrs.fields(HistoryPage)))
    liar = ReadFence(_Liar("globex"), _Liar("zed"), _Liar("s9"), page.read_fence.point)
    before = await _stored(pair, ANA, "s1")
    for value in (own_page, liar):
        with pytest.raises(InvalidArgumentError) as caught:
            await pair.host.append(ANA, "s1", TURN, after_read=value)
        assert "nothing was written" in str(caught.value)
        assert await _stored(pair, ANA, "s1") == before


def test_the_blocking_twin_passes_after_read_on() -> None:
    """``BlockingRuntime.append(after_read=...)``: the same check, from a request thread."""
    archive, store = InMemoryArchive(), InMemorySessionStore()
    host = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
    )
    with BlockingRuntime(host) as blocking:
        blocking.append(ANA, "s1", [Message(Role.USER, "first secret qzfirstq")])
        page = blocking.read_history(ANA, "s1", max_groups=10)
        blocking.erase(_erasure("session"), reason="dsr", attestation=OPERATOR)
        with pytest.raises(ErasedSinceReadError):
            blocking.append(ANA, "s1", TURN, after_read=page)
        with pytest.raises(InvalidArgumentError):
            blocking.append(ANA, "s1", TURN, after_read="a page")  # type: ignore[arg-type]
        assert blocking.read_history(ANA, "s1", max_groups=10, view=False).groups == ()
