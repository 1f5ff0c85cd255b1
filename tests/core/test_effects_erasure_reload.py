"""What ran in a turn is never committed into a session erased while the turn ran (privacy review).

A turn whose tool ran commits what ran even when its own commit cannot be
(docs/runtime.md, "Errors and what was committed"): on a conflict, a
cancellation or a failure after its commit began, the session is loaded
again and the tool calls and results — and the user's message — are
committed on its new head. When another process erased the session
completely between the turn's load and that load again, the new head is the
erased id, empty or reused: the load again saw no erasure pending, and the
turn's content, all of it from before the erasure, would land in it.

Two runtimes over the same stores (in memory, or one SQLite file) stand for
the two processes: ``slow`` runs the turn, ``other`` erases and writes.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, HeldOnce, history_texts, turn_while_held
from _erasure_records import as_earlier_versions, joined_record

from agentium_harness import (
    CommitState,
    EffectLevel,
    EraseTarget,
    ErasureState,
    Message,
    ProviderError,
    SessionConflictError,
    Tool,
    ToolRegistry,
    ToolStatus,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

pytestmark = pytest.mark.anyio

#: Text of the turn under test: none of it may be found in the session afterwards.
TURN = "deploy v2 qzturnq"
RESULT = "deployed v2 qzresultq"


class Held(ScriptedProvider):
    """The scripted provider after ``primed`` turns: the turn's second call waits for ``release``.

    Then it answers, or fails when ``fail`` is set.
    """

    def __init__(self, primed: int) -> None:
        super().__init__(replies=[*["noted"] * primed, DEPLOY, "Deployed."])
        self.hold, self.made = primed + 2, 0
        self.started, self.release = anyio.Event(), anyio.Event()
        self.fail = False

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        if self.made == self.hold:
            self.started.set()
            await self.release.wait()
            if self.fail:
                raise ConnectionError("upstream reset the connection")
        return await super().complete(request, ctx)


def _tools(log: list[str]) -> ToolRegistry:
    async def deploy(args: Any) -> str:
        log.append(f"deployed to {args['to']}")
        return RESULT

    return ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])


def _pair(kind: str, tmp_path: Path, provider: ScriptedProvider, log: list[str]) -> tuple[Any, Any]:
    """The turn's runtime and the other process's, over the same stores."""
    other_provider = ScriptedProvider(replies=["ok"], cycle=True)
    if kind == "memory":
        archive, store = InMemoryArchive(), InMemorySessionStore()
        slow = create_harness_runtime(
            provider=provider, archive=archive, session_store=store, tools=_tools(log)
        )
        other = create_harness_runtime(provider=other_provider, archive=archive, session_store=store)
        return slow, other
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    slow = create_harness_runtime(
        provider=provider,
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        tools=_tools(log),
    )
    other = create_harness_runtime(
        provider=other_provider, archive=SQLiteArchive(config), session_store=SQLiteSessionStore(config)
    )
    return slow, other


async def _turn_while(
    slow: Any, provider: Held, meanwhile: Any, *, ending: str
) -> tuple[BaseException | None, bool]:
    """Run the turn; once its tool ran, await ``meanwhile()``, then end the turn by ``ending``.

    ``answer``: the model answers (the turn's commit meets what ``meanwhile`` did);
    ``provider``: the model call fails; ``cancelled``: the host cancels the run.
    Returns the run's error and whether it was cancelled.
    """
    caught: list[BaseException] = []
    cancelled = False
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def turn() -> None:
            nonlocal cancelled
            with scope:
                try:
                    await slow.run(ANA, "s1", TURN, grants=["deploy"])
                except Exception as exc:
                    caught.append(exc)
            cancelled = scope.cancelled_caught

        tg.start_soon(turn)
        with anyio.fail_after(30):
            await provider.started.wait()  # the tool ran; the turn waits on the model
        await meanwhile()
        if ending == "cancelled":
            scope.cancel()
        else:
            provider.fail = ending == "provider"
            provider.release.set()
    return (caught[0] if caught else None), cancelled


def _assert_refused(error: BaseException | None, cancelled: bool, ending: str) -> None:
    if ending == "cancelled":
        assert cancelled and error is None
        return
    expected = SessionConflictError if ending == "answer" else ProviderError
    assert isinstance(error, expected), error
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert "could not be committed either" in str(error)
    report = error.run_result
    assert report is not None and not report.committed
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    failed = [d for d in report.diagnostics if d.code == "effects_commit_failed"]
    assert failed
    if ending == "answer":  # refused by the load again (a provider failure: by the commit fence)
        assert "was erased" in str(error) and "was erased" in failed[0].message


def _assert_warned(caplog: pytest.LogCaptureFixture) -> None:
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "not committed" in r.getMessage()]
    assert warned
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("writer", [False, True], ids=["erased", "erased-then-reused"])
@pytest.mark.parametrize("ending", ["answer", "cancelled", "provider"])
async def test_what_ran_is_not_committed_into_a_session_erased_meanwhile(
    kind: str, writer: bool, ending: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The turn's commit conflicts (``answer``) or the host cancels it: the session is loaded again.

    ``provider`` (a model call fails after the tool) commits on the session
    as loaded, and the commit fence refuses it; it is here as a guard.
    """
    log: list[str] = []
    provider = Held(primed=2)
    slow, other = _pair(kind, tmp_path, provider, log)
    target = EraseTarget.session("acme", "ana", "s1")
    erased: list[Any] = []
    try:
        await slow.run(ANA, "s1", "first secret qzfirstq")
        await slow.run(ANA, "s1", "second turn")

        async def meanwhile() -> None:
            erased.append(await other.erase(target, reason="dsr", attestation=OPERATOR))
            if writer:
                await other.run(ANA, "s1", "after the erasure")

        caplog.set_level(logging.WARNING)
        error, cancelled = await _turn_while(slow, provider, meanwhile, ending=ending)
        assert log == ["deployed to prod"]  # the tool ran
        # Nothing of the turn, or of the session before the erasure, is in the session.
        texts = await history_texts(slow, "s1")
        assert not [t for t in texts if "qz" in t], texts
        _assert_refused(error, cancelled, ending)
        if ending != "provider":  # the provider's error says it all; a load again also logs it
            _assert_warned(caplog)
        view = await slow.inspect_session(ANA, "s1")
        assert view.interrupted == ()
        if writer:
            assert texts == ["after the erasure", "ok"] and view.next_seq == 1
        else:
            assert texts == [] and not view.exists
        (result,) = erased
        assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
        assert [(r.erasure_id, r.state) for r in view.erasures] == [
            (result.tombstone.erasure_id, ErasureState.COMPLETE)
        ]
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_erasure_of_another_session_still_lets_what_ran_be_committed(
    kind: str, tmp_path: Path
) -> None:
    """Only another session of the tenant was erased: the conflict's reload commits what ran, as ever."""
    log: list[str] = []
    provider = Held(primed=2)
    slow, other = _pair(kind, tmp_path, provider, log)
    try:
        await slow.run(ANA, "s1", "first turn")
        await slow.run(ANA, "s9", "another session qzotherq")

        async def meanwhile() -> None:
            done = await other.erase(
                EraseTarget.session("acme", "ana", "s9"), reason="dsr", attestation=OPERATOR
            )
            assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE
            await other.run(ANA, "s1", "a concurrent turn")  # the turn's commit conflicts with it

        error, _ = await _turn_while(slow, provider, meanwhile, ending="answer")
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.COMMITTED
        report = error.run_result
        assert report is not None and report.committed and report.group_seq == 2
        assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
        texts = await history_texts(slow, "s1")
        assert texts[:4] == ["first turn", "noted", "a concurrent turn", "ok"]
        assert TURN in texts and RESULT in texts
        view = await slow.inspect_session(ANA, "s1")
        assert [seq for seq, _ in view.interrupted] == [2]
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("records", ["this-version", "earlier-version"])
async def test_a_session_erased_before_the_turn_keeps_what_ran_when_the_tenant_erased_meanwhile(
    kind: str,
    records: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session id was erased, then used again, before the turn; during it only another session was.

    The erasure's tombstone says at which ledger revision it joined: before
    the turn's load, so what ran is committed on the reload. A tombstone
    written by an earlier version does not say it: conservatively refused,
    and the error says why.
    """
    log: list[str] = []
    provider = Held(primed=3)
    slow, other = _pair(kind, tmp_path, provider, log)
    try:
        await slow.run(ANA, "s1", "before the first erasure")
        with as_earlier_versions(monkeypatch) if records == "earlier-version" else nullcontext():
            done = await other.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
            )
        kept = await joined_record(other.session_store, "acme", done.record.erasure_id)
        await slow.run(ANA, "s1", "first turn again")
        await slow.run(ANA, "s9", "another session")

        async def meanwhile() -> None:
            await other.erase(EraseTarget.session("acme", "ana", "s9"), reason="dsr", attestation=OPERATOR)
            await other.run(ANA, "s1", "a concurrent turn")

        caplog.set_level(logging.WARNING)
        error, cancelled = await _turn_while(slow, provider, meanwhile, ending="answer")
        texts = await history_texts(slow, "s1")
        if records == "earlier-version":
            _assert_refused(error, cancelled, "answer")
            assert "may predate the erasure" in str(error)
            _assert_warned(caplog)
            assert texts == ["first turn again", "noted", "a concurrent turn", "ok"]
            assert kept is None  # as an earlier version: no join record
            return
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.COMMITTED
        report = error.run_result
        assert report is not None and report.committed and report.group_seq == 2
        assert texts[:4] == ["first turn again", "noted", "a concurrent turn", "ok"]
        assert TURN in texts and RESULT in texts
        assert not [r for r in caplog.records if "erasure of its session" in r.getMessage()]
        assert kept is not None  # (checked last: the behaviour above is what the test is about)
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_session_erased_before_and_again_during_the_turn_refuses_what_ran(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Exact both ways: the earlier erasure does not refuse, the one during the turn does."""
    log: list[str] = []
    provider = Held(primed=2)
    slow, other = _pair(kind, tmp_path, provider, log)
    target = EraseTarget.session("acme", "ana", "s1")
    erased: list[Any] = []
    try:
        await slow.run(ANA, "s1", "before the first erasure")
        await other.erase(target, reason="dsr", attestation=OPERATOR)
        await slow.run(ANA, "s1", "first turn again")

        async def meanwhile() -> None:
            erased.append(await other.erase(target, reason="dsr", attestation=OPERATOR))
            await other.run(ANA, "s1", "after the erasure")

        caplog.set_level(logging.WARNING)
        error, cancelled = await _turn_while(slow, provider, meanwhile, ending="answer")
        _assert_refused(error, cancelled, "answer")
        (result,) = erased
        assert result.record.erasure_id in str(error)  # the erasure during the turn is named
        _assert_warned(caplog)
        assert await history_texts(slow, "s1") == ["after the erasure", "ok"]
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("level", ["session", "user"])
async def test_a_new_sessions_first_turn_is_not_committed_after_an_erasure_of_it_meanwhile(
    kind: str, level: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The session is absent at the load and after the erasure: only the tombstone says it ran."""
    provider = HeldOnce(armed=True)
    slow, other = _pair(kind, tmp_path, provider, [])
    target = (
        EraseTarget.session("acme", "ana", "s1") if level == "session" else EraseTarget.user("acme", "ana")
    )
    erased: list[Any] = []
    try:

        async def meanwhile() -> None:
            erased.append(await other.erase(target, reason="dsr", attestation=OPERATOR))

        caplog.set_level(logging.WARNING)
        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        assert await history_texts(slow, "s1") == []
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert "was erased" in str(error) and "may predate the erasure" in str(error)
        _assert_warned(caplog)
        (result,) = erased
        assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
        assert not (await slow.inspect_session(ANA, "s1")).exists
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_new_sessions_first_turn_is_committed_when_only_another_session_was_erased(
    kind: str, tmp_path: Path
) -> None:
    provider = HeldOnce(armed=True)
    slow, other = _pair(kind, tmp_path, provider, [])
    try:
        await other.run(ANA, "s9", "another session")

        async def meanwhile() -> None:
            await other.erase(EraseTarget.session("acme", "ana", "s9"), reason="dsr", attestation=OPERATOR)

        assert await turn_while_held(slow, provider, "s1", TURN, meanwhile) is None
        assert await history_texts(slow, "s1") == [TURN, "noted"]
    finally:
        await slow.aclose()
        await other.aclose()


class _ErasingOnLoad(InMemorySessionStore):
    """The shipped in-memory store; the next load of ``s1`` runs ``meanwhile`` first (once).

    An erasure landing between an append's load and its commit, as another process's would.
    """

    meanwhile: Any = None

    async def load(self, key: Any, ctx: OpContext) -> Any:
        found = await super().load(key, ctx)
        if self.meanwhile is not None and key.tenant == "acme" and key.session == "s1":
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return found


@pytest.mark.parametrize("records", ["this-version", "earlier-version"])
async def test_an_append_to_an_id_erased_before_while_the_tenant_erases(
    records: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The id's erasure joined the ledger before the append loaded: the append commits.

    Written by an earlier version, the tombstone does not say when it joined:
    conservative, and transient. Only the append whose commit saw the ledger
    move is refused; its WARNING names the operation as it is ("append not
    committed"); the same append again, with no erasure during it, commits.
    """
    store = _ErasingOnLoad()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=InMemoryArchive(), session_store=store
    )
    message = [Message(role="user", content="after the erasure")]
    try:
        await runtime.append(ANA, "s1", [Message(role="user", content="before qzbeforeq")])
        await runtime.append(ANA, "s9", [Message(role="user", content="another session")])
        with as_earlier_versions(monkeypatch) if records == "earlier-version" else nullcontext():
            done = await runtime.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
            )
        kept = await joined_record(store, "acme", done.record.erasure_id)

        async def erase_another() -> None:
            await runtime.erase(EraseTarget.session("acme", "ana", "s9"), reason="dsr", attestation=OPERATOR)

        store.meanwhile = erase_another
        caplog.set_level(logging.WARNING)
        if records == "this-version":
            committed = await runtime.append(ANA, "s1", message)
            assert store.meanwhile is None  # the erasure did run between the load and the commit
            assert committed.seq == 0 and await history_texts(runtime, "s1") == ["after the erasure"]
            assert not [r for r in caplog.records if "erasure of its session" in r.getMessage()]
            assert kept is not None  # (checked last: the behaviour above is what the test is about)
            return
        with pytest.raises(SessionConflictError) as caught:
            await runtime.append(ANA, "s1", message)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert "may predate the erasure" in str(caught.value)
        _assert_warned(caplog)
        warned = [r.getMessage() for r in caplog.records if "erasure of its session" in r.getMessage()]
        assert [w.split(":")[0] for w in warned] == ["append not committed"]
        assert await history_texts(runtime, "s1") == []
        again = await runtime.append(ANA, "s1", message)
        assert again.seq == 0 and await history_texts(runtime, "s1") == ["after the erasure"]
        assert kept is None  # as an earlier version: no join record
    finally:
        await runtime.aclose()
