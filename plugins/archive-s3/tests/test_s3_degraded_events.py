"""Every degraded outcome of the S3 adapters: a WARNING and an event on the adapter call's span, no content.

Found by the observability audit: a session save settled by reading back,
sent again, or left unknown, and a create moved past the revision floor,
logged a WARNING on ``agentium.plugins.archive_s3`` but put nothing on a
span; an archived group's damaged upload, sent again, did neither. Each case
drives a runtime turn through a real server (the fault proxy, or botocore
hooks on a lent client, produce the fault) with telemetry recording, and
checks the WARNING, the event (name and attributes) on the engine's
adapter-call span, and that the turn's text reaches neither.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from s3_fault_proxy import Fault, FaultProxy
from s3_faults import InjectedErrors
from s3_helpers import BUCKET, raw_client
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_archive_s3.keys import session_object_key
from agentium_archive_s3.revision_floor import raise_floor
from agentium_harness import (
    AgentiumError,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import HistoryArchive, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SECRET = "QZV-s3-secret-4417"
LOGGER = "agentium.plugins.archive_s3"


@dataclass
class Armed:
    """A case's store config, the client it lends (closed at the end) and ``go``, which arms its fault."""

    config: S3Config
    go: Callable[[], object]
    client: Any = None
    #: Other clients its hooks use (closed at the end).
    others: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Case:
    """One degraded outcome: how to arm it before the second turn, and what it must leave behind."""

    name: str
    #: ``arm(config, proxy, server)``: the adapters' setup; its ``go`` runs after the first turn.
    arm: Callable[[S3Config, FaultProxy, S3Server], Armed]
    #: The adapter-call span the event lands on.
    span: str
    event: str
    attributes: dict[str, str]
    warning: str
    #: Whether the second turn's session is a new one (a create) rather than the first turn's.
    create: bool = False
    #: Whether the archive is the S3 one (groups evicted from the second turn on).
    s3_archive: bool = False


def _through(config: S3Config, proxy: FaultProxy, attempts: int) -> S3Config:
    return attrs.evolve(config, endpoint_url=proxy.endpoint, max_attempts=attempts)


def _refused_once(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    # Closed before it reached the server: no reply, the session unchanged, so it is sent again.
    return Armed(_through(config, proxy, 1), lambda: proxy.add(Fault("refuse", "PUT", "/sessions/")))


def _dropped_then_412(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    # Stored, its reply lost; botocore's own retry then meets 412 and the read-back finds our bytes.
    return Armed(_through(config, proxy, 2), lambda: proxy.add(Fault("drop", "PUT", "/sessions/")))


def _dropped(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    # Stored, its reply lost, no SDK retry: the read-back shows it landed.
    return Armed(_through(config, proxy, 1), lambda: proxy.add(Fault("drop", "PUT", "/sessions/")))


def _damaged(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    return Armed(_through(config, proxy, 1), lambda: proxy.add(Fault("corrupt_request", "PUT", "/sessions/")))


def _unreadable(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    # Stored, its reply lost, and every read-back refused: the outcome stays unknown.

    def go() -> None:
        drop = proxy.add(Fault("drop", "PUT", "/sessions/"))
        proxy.add(Fault("refuse", "GET", "/sessions/", count=1000, after=drop))  # not the turn's load

    return Armed(_through(config, proxy, 1), go)


def _answered_500_and_removed(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    # The server answers 500 and, meanwhile, the snapshot was removed behind the store's back.
    client = raw_client(server, retries={"total_max_attempts": 1, "mode": "standard"})
    admin = raw_client(server)
    object_key = session_object_key(config.prefix, SessionKey("acme", "ana", "s1"))

    def remove(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key") == object_key and "IfMatch" in params:
            admin.delete_object(Bucket=BUCKET, Key=object_key)

    def go() -> None:
        client.meta.events.register("before-parameter-build.s3.PutObject", remove)
        InjectedErrors(client, 500, count=1)

    return Armed(config, go, client, (admin,))


def _floor_raised_meanwhile(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    # An erasure in another process raises the floor between the create's floor read and its write.
    client = raw_client(server)
    admin = raw_client(server)
    raised: list[int] = []

    def raise_it(params: dict[str, Any], **_: Any) -> None:
        if not raised and "IfNoneMatch" in params and "/sessions/" in str(params.get("Key")):
            raised.append(raise_floor(admin, config, 5, OpContext.with_timeout(30)))

    return Armed(
        config,
        lambda: client.meta.events.register("before-parameter-build.s3.PutObject", raise_it),
        client,
        (admin,),
    )


def _group_damaged(config: S3Config, proxy: FaultProxy, server: S3Server) -> Armed:
    return Armed(_through(config, proxy, 1), lambda: proxy.add(Fault("corrupt_request", "PUT", "/archive/")))


CASES = [
    Case(
        "reply lost, unchanged: sent again",
        _refused_once,
        "agentium.session.save",
        "agentium.s3.save_resent",
        {"agentium.s3.reason": "reply_lost"},
        "sending it again",
    ),
    Case(
        "reply lost, retry refused 412: landed",
        _dropped_then_412,
        "agentium.session.save",
        "agentium.s3.save_settled",
        {"agentium.s3.outcome": "landed", "error.type": "PreconditionFailed"},
        "the read-back shows the write landed",
    ),
    Case(
        "reply lost: the read-back shows it landed",
        _dropped,
        "agentium.session.save",
        "agentium.s3.save_settled",
        {"agentium.s3.outcome": "landed", "error.type": "ConnectionClosedError"},
        "but the read-back shows it landed",
    ),
    Case(
        "upload damaged: sent again",
        _damaged,
        "agentium.session.save",
        "agentium.s3.save_resent",
        {"agentium.s3.reason": "damaged"},
        "reached the server damaged",
    ),
    Case(
        "read-back failed: unknown",
        _unreadable,
        "agentium.session.save",
        "agentium.s3.save_outcome_unknown",
        {"agentium.s3.read_back": "failed", "error.type": "ConnectionClosedError"},
        "the read-back failed too",
    ),
    Case(
        "session changed since: unknown",
        _answered_500_and_removed,
        "agentium.session.save",
        "agentium.s3.save_outcome_unknown",
        {"agentium.s3.read_back": "changed", "error.type": "InternalError"},
        "the session changed since",
    ),
    Case(
        "create raced an erasure: moved past the floor",
        _floor_raised_meanwhile,
        "agentium.session.save",
        "agentium.s3.create_moved_past_floor",
        {},
        "moving it past the floor",
        create=True,
    ),
    Case(
        "archived group damaged: sent again",
        _group_damaged,
        "agentium.archive.append",
        "agentium.s3.append_resent",
        {"agentium.s3.reason": "damaged"},
        "upload reached the server damaged",
        s3_archive=True,
    ),
]


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_degraded_outcome_is_a_warning_and_an_event_on_the_adapter_calls_span(
    server: S3Server,
    config: S3Config,
    proxy: FaultProxy,
    caplog: pytest.LogCaptureFixture,
    case: Case,
) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    # One store for every turn: the first ones (clean, through the same endpoint and client) warm it up.
    armed = case.arm(config, proxy, server)
    store = S3SessionStore(armed.config, client=armed.client)
    archive: HistoryArchive = (
        S3Archive(armed.config, client=armed.client) if case.s3_archive else InMemoryArchive()
    )
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[f"{SECRET} reply"], cycle=True),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(op_timeout_s=30, resident=ResidentLimits(max_groups=1)),
        telemetry=Telemetry(tracer_provider=tracer_provider),
        owned=[store, archive],
    )
    try:
        async with runtime:
            # Two turns: a create and a replace, so the store has learnt the server's IfMatch form
            # (Ceph RGW's is unquoted) and the fault meets the write that counts, not a refused one.
            for text in ("first", "warm"):
                assert (await runtime.run(ANA, "s1", f"{SECRET} {text}")).committed
            exporter.clear()
            armed.go()
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                try:
                    await runtime.run(ANA, "s2" if case.create else "s1", f"{SECRET} second")
                except AgentiumError:
                    pass  # an unknown outcome fails the turn, typed; the event is what is checked
    finally:
        for client in (armed.client, *armed.others):
            if client is not None:
                client.close()
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert any(case.warning in r.getMessage() for r in warnings), [r.getMessage() for r in warnings]
    spans = exporter.get_finished_spans()
    found = [
        (s.name, e.name, dict(e.attributes or {}))
        for s in spans
        for e in s.events
        if e.name.startswith("agentium.s3.")
    ]
    assert (case.span, case.event, case.attributes) in found, found
    # No content: the turn's text is in no WARNING and no span event.
    assert all(SECRET not in r.getMessage() for r in warnings)
    assert all(SECRET not in str(e.attributes) for s in spans for e in s.events)
