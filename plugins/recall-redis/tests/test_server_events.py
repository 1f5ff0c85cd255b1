"""A server restart and a persistence change: each a WARNING and a span event, under the adapter call.

Found by the observability audit: the store logged both at WARNING but put
nothing on a span. Each case runs a turn through a runtime with telemetry
recording against a real server, changes the server (a restart without
persistence on the same port; ``CONFIG SET appendfsync`` and the store's
connections dropped), runs a second turn, and checks the WARNING, the event
(name and attributes) on the round trip's ``redis <command>`` span under an
``agentium.recall.*`` adapter-call span, and that the turns' text reaches
no span.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import Telemetry, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.testing import SpanRecorder
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SECRET = "qzvredis4417"
LOGGER = "agentium.plugins.recall_redis"


async def _two_turns(
    url: str, change: Callable[[], Awaitable[None]], caplog: pytest.LogCaptureFixture
) -> tuple[RedisRecallStore, SpanRecorder]:
    """A turn, ``change``, another turn; the spans of the second turn only."""
    recorder = SpanRecorder()
    store = RedisRecallStore(RedisRecallConfig(url=url, key_prefix=new_prefix()))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted", "noted again"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        telemetry=Telemetry(tracer_provider=recorder.provider),
    )
    with anyio.fail_after(30):
        async with runtime:
            await runtime.run(ANA, "s1", f"first {SECRET}")
            await change()
            recorder.clear()
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                await runtime.run(ANA, "s1", f"second {SECRET}")
    return store, recorder


def _events(recorder: SpanRecorder, name: str) -> list[dict[str, object]]:
    """Attributes of each ``name`` event: on the round trip that found it, under an adapter-call span."""
    spans = recorder.finished
    by_id = {s.context.span_id: s for s in spans}
    found: list[dict[str, object]] = []
    for span in spans:
        for event in span.events:
            if event.name != name:
                continue
            above, parent = [], span.parent
            while parent is not None and parent.span_id in by_id:
                above.append(by_id[parent.span_id].name)
                parent = by_id[parent.span_id].parent
            assert span.name.startswith("redis "), span.name
            assert above and above[0].startswith("agentium.recall."), (span.name, above)
            found.append(dict(event.attributes or {}))
    return found


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]


async def test_a_restart_is_a_warning_and_a_span_event(
    aof_server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain: ServerProcess | None = None

    async def restart_without_persistence() -> None:
        nonlocal plain
        aof_server.kill()
        plain = ServerProcess(aof_server.flavour, tmp_path / "plain").start(aof_server.port)

    try:
        store, recorder = await _two_turns(aof_server.url, restart_without_persistence, caplog)
    finally:
        if plain is not None:
            plain.stop()
    assert any("restarted" in m for m in _warnings(caplog)), _warnings(caplog)
    events = _events(recorder, "agentium.recall.redis_server_restarted")
    assert events == [{"agentium.restarts": 1, "agentium.durable": "false"}], events
    # A restart is one outcome: it is not also reported as a persistence change.
    assert not _events(recorder, "agentium.recall.redis_persistence_changed")
    assert all(SECRET not in text for text in recorder.carried())
    report = store.server_report
    assert report is not None and report.restarts == 1


async def test_a_persistence_change_is_a_warning_and_a_span_event(
    aof_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    admin = aioredis.Redis.from_url(aof_server.url)

    async def fsync_every_second_and_reconnect() -> None:
        await admin.config_set("appendfsync", "everysec")
        # The store sees a setting changed while its connections stay up on its next reconnection.
        await admin.client_kill_filter(_type="normal", skipme=True)

    try:
        store, recorder = await _two_turns(aof_server.url, fsync_every_second_and_reconnect, caplog)
    finally:
        await admin.aclose()
    assert any("persistence changed" in m for m in _warnings(caplog)), _warnings(caplog)
    events = _events(recorder, "agentium.recall.redis_persistence_changed")
    assert events == [{"agentium.restarts": 0, "agentium.durable": "false"}], events
    assert not _events(recorder, "agentium.recall.redis_server_restarted")
    assert all(SECRET not in text for text in recorder.carried())
    report = store.server_report
    assert report is not None and report.appendfsync == "everysec"
