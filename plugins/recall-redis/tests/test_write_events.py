"""A write that lost its reply: a WARNING and a span event, under the adapter call, with no content.

Found by the observability audit: ``writes.py`` logged both outcomes (settled
by re-reading; not settled by the deadline, so unknown) at WARNING but put
nothing on a span. The server sits behind a real TCP proxy (``net_proxy``):
freezing the write's connection (a new one, the settlement's, works) gives
the settled outcome; a black hole (no connection works) the unknown one. A
runtime with telemetry recording indexes a document through the store and
the test checks the WARNING, the event (name and attributes) on the
``agentium.recall.*`` adapter-call span, and that the text reaches no span.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from net_proxy import BlackHoleProxy
from redis.asyncio.connection import AbstractConnection
from redis_servers import new_prefix

from agentium_harness import AgentiumError, OpContext, SourceOwner, Telemetry, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.testing import SpanRecorder
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore, writes

pytestmark = pytest.mark.anyio

SECRET = "qzvwrite5521"
LOGGER = "agentium.plugins.recall_redis"
EVENT = "agentium.recall.redis_write_reply_lost"


async def _lost_write(
    proxy: BlackHoleProxy, cut: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> tuple[SpanRecorder, AgentiumError, list[str]]:
    """Index a document through a traced runtime while ``cut`` ("freeze" or "black_hole") loses its reply."""
    timeout_s = 1.0
    if cut == "freeze":
        # The settlement (a new connection, then a script) gets about a second: at the default share
        # a 1 s write kept it 0.2 s, which a loaded machine passed (the outcome then unknown).
        monkeypatch.setattr(writes, "SETTLE_SHARE", 0.5)
        timeout_s = 2.0
    recorder = SpanRecorder()
    # A short settle bound: an unsettled write's background settlement ends soon after the heal.
    store = RedisRecallStore(RedisRecallConfig(url=proxy.url, key_prefix=new_prefix(), settle_timeout_s=2.0))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["unused"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        telemetry=Telemetry(tracer_provider=recorder.provider),
    )
    with anyio.fail_after(30):
        async with runtime:
            await store.health(OpContext.with_timeout(10))  # the connection the write will use
            proxy.freeze_existing() if cut == "freeze" else proxy.black_hole()
            try:
                with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(AgentiumError) as caught:
                    await runtime.index_document(
                        SourceOwner("acme"), "d", f"kiwi {SECRET}", timeout_s=timeout_s
                    )
            finally:
                proxy.heal()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    return recorder, caught.value, warnings


def _events(recorder: SpanRecorder) -> list[dict[str, object]]:
    """Attributes of each lost-reply event, checking it is on an ``agentium.recall.*`` adapter-call span."""
    spans = recorder.finished
    by_id = {s.context.span_id: s for s in spans}
    found: list[dict[str, object]] = []
    for span in spans:
        for event in span.events:
            if event.name != EVENT:
                continue
            chain, parent = [span.name], span.parent
            while parent is not None and parent.span_id in by_id:
                chain.append(by_id[parent.span_id].name)
                parent = by_id[parent.span_id].parent
            assert chain[0].startswith("agentium.recall."), chain  # on the adapter-call span itself
            found.append(dict(event.attributes or {}))
    return found


async def test_a_write_settled_by_re_reading_is_a_warning_and_a_span_event(
    proxy: BlackHoleProxy, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, error, warnings = await _lost_write(proxy, "freeze", caplog, monkeypatch)
    assert "settled by re-reading" in str(error), error
    assert any("lost its reply; settled" in m for m in warnings), warnings
    assert _events(recorder) == [{"agentium.settled": True, "agentium.applied": 0, "agentium.calls": 1}]
    assert all(SECRET not in text for text in recorder.carried())


async def test_a_write_whose_outcome_is_unknown_is_a_warning_and_a_span_event(
    proxy: BlackHoleProxy, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, error, warnings = await _lost_write(proxy, "black_hole", caplog, monkeypatch)
    assert "unknown" in str(error), error
    assert any("lost its reply and could not be settled" in m for m in warnings), warnings
    assert _events(recorder) == [{"agentium.settled": False, "agentium.calls": 1}]
    assert all(SECRET not in text for text in recorder.carried())


async def test_a_sent_write_whose_caller_is_cancelled_is_a_warning_and_a_span_event(
    proxy: BlackHoleProxy, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller gives up long before the call's deadline: the store cannot settle in time and
    # said nothing before (found when the engine's cancellation at the deadline beat the store's
    # own settlement bound in CI: the unknown outcome went without its WARNING and event).
    # The caller cancels once the write was sent into the black hole, not after a fixed 0.5 s: a
    # loaded machine reaching the send later had the write cancelled unsent (nothing to report).
    sent = anyio.Event()
    holed = False
    send = AbstractConnection.send_packed_command

    async def sending(conn: AbstractConnection, *args: Any, **kwargs: Any) -> None:
        await send(conn, *args, **kwargs)
        if holed:
            sent.set()

    monkeypatch.setattr(AbstractConnection, "send_packed_command", sending)
    recorder = SpanRecorder()
    store = RedisRecallStore(RedisRecallConfig(url=proxy.url, key_prefix=new_prefix(), settle_timeout_s=2.0))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["unused"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        telemetry=Telemetry(tracer_provider=recorder.provider),
    )
    with anyio.fail_after(30):
        async with runtime:
            await store.health(OpContext.with_timeout(10))
            proxy.black_hole()
            holed = True
            try:
                with caplog.at_level(logging.WARNING, logger=LOGGER), anyio.CancelScope() as scope:

                    async def cancel_once_sent() -> None:
                        await sent.wait()
                        scope.cancel()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(cancel_once_sent)
                        await runtime.index_document(
                            SourceOwner("acme"), "d", f"kiwi {SECRET}", timeout_s=20.0
                        )
            finally:
                proxy.heal()
    assert scope.cancelled_caught
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    assert any("could not be settled before the call was cancelled" in m for m in warnings), warnings
    assert _events(recorder) == [{"agentium.settled": False, "agentium.calls": 1}]
    assert all(SECRET not in text for text in recorder.carried())


async def test_a_write_that_ran_but_lost_its_reply_is_a_warning_and_a_span_event(
    server: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write reached the server and ran; its reply was lost (the connection broke as it came back).
    # Settling found it applied, and the call returns the success it was: but the lost reply is the same
    # degradation as when settling found it fenced, and the README and the module say a lost reply,
    # settled or not, is a WARNING and a span event. This one was silent.
    from redis.exceptions import ConnectionError as RedisConnectionError

    from agentium_recall_redis.link import Link
    from agentium_recall_redis.scripts import INDEX

    roundtrip = Link._roundtrip_once
    lost: list[bool] = []

    async def losing(self: Link, commands: Any, attempt: Any, checked: bool) -> Any:
        replies = await roundtrip(self, commands, attempt, checked)  # the write ran: its reply is read
        if attempt is not None and not lost and any(INDEX.sha in map(str, c) for c in commands):
            lost.append(True)
            raise RedisConnectionError("Connection closed by server.")  # and lost on its way back
        return replies

    monkeypatch.setattr(Link, "_roundtrip_once", losing)
    recorder = SpanRecorder()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["unused"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        telemetry=Telemetry(tracer_provider=recorder.provider),
    )
    with anyio.fail_after(30):
        async with runtime:
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                await runtime.index_document(SourceOwner("acme"), "d", f"kiwi {SECRET}", timeout_s=10.0)
    assert lost, "the write's round trip was never seen"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    assert any("lost its reply; settled: 1 of 1" in m for m in warnings), warnings
    assert _events(recorder) == [{"agentium.settled": True, "agentium.applied": 1, "agentium.calls": 1}]
    assert all(SECRET not in text for text in recorder.carried())


async def test_an_interrupt_after_a_write_was_sent_goes_on_as_it_came(
    server: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A KeyboardInterrupt (or SystemExit) raised while a sent write waited for its reply was settled
    # in the foreground like a broken connection and never raised again: a write that had run returned
    # its success, one fenced raised RedisRecallTimeoutError: the interrupt was lost either way. It
    # goes on now, as a cancellation does: the settlement runs in the background, said at WARNING.
    from agentium_recall_redis.link import Link
    from agentium_recall_redis.scripts import INDEX

    roundtrip = Link._roundtrip_once

    async def interrupted(self: Link, commands: Any, attempt: Any, checked: bool) -> Any:
        replies = await roundtrip(self, commands, attempt, checked)
        if attempt is not None and any(INDEX.sha in map(str, c) for c in commands):
            raise KeyboardInterrupt
        return replies

    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    try:
        with anyio.fail_after(30):
            await store.health(OpContext.with_timeout(10))
            monkeypatch.setattr(Link, "_roundtrip_once", interrupted)
            with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(KeyboardInterrupt):
                await store.index_document(SourceOwner("acme"), "d", "kiwi text", OpContext.with_timeout(10))
            monkeypatch.undo()
    finally:
        await store.aclose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    assert any("could not be settled before the call was cancelled" in m for m in warnings), warnings
