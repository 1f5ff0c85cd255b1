"""The session store's snapshot object: its revision is inside its digest, and saves report truthfully.

- A bit flipped in the stored revision fails the load closed (it is covered
  by the object's digest); objects of the previous format still load and are
  rewritten in the current one at their next save.
- A save whose outcome the client did not see (the reply lost, the server
  answering 5xx, the deadline passing with the request on the wire) is
  settled by reading the session back: landed is success, unchanged is a
  failure that says nothing was written, and anything the store cannot tell
  is :class:`~agentium_archive_s3.S3SaveOutcomeUnknownError`. A load waits
  (within its deadline) for a save of the same store still in flight, so a
  read-back never reports the state from before a write that then lands.
- Through a runtime: a save that lands with its reply lost, or after the
  engine's deadline (the request held by the proxy), gives a run whose
  ``commit_state`` is ``committed`` (or ``unknown`` when every read-back
  gave up first), never ``not_committed``, and the turn is stored once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import anyio
import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_faults import InjectedErrors
from s3_helpers import BUCKET, raw_client
from s3_servers import S3Server

from agentium_archive_s3 import (
    S3Archive,
    S3Config,
    S3SaveOutcomeUnknownError,
    S3SessionStore,
    S3UnavailableError,
)
from agentium_archive_s3.keys import session_object_key
from agentium_harness import (
    AgentiumError,
    CommitState,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import (
    OpContext,
    OperationCancelledError,
    SessionKey,
    SnapshotCorruptError,
    snapshot_bytes,
)
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "saves")
ANA = VerifiedIdentity("acme", "ana", "test-auth")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _object(admin: Any, config: S3Config) -> bytes:
    return bytes(admin.get_object(Bucket=BUCKET, Key=session_object_key(config.prefix, KEY))["Body"].read())


def _put(admin: Any, config: S3Config, body: bytes) -> None:
    admin.put_object(Bucket=BUCKET, Key=session_object_key(config.prefix, KEY), Body=body)


async def test_a_bit_flipped_in_the_stored_revision_fails_the_load_closed(
    config: S3Config, admin: Any
) -> None:
    store = S3SessionStore(config)
    try:
        first = await store.save(KEY, scoped_snapshot(KEY, " one"), None, OpContext.with_timeout(30))
        second = await store.save(KEY, scoped_snapshot(KEY, " two"), first, OpContext.with_timeout(30))
        assert second == 2
        body = _object(admin, config)
        assert b"revision=2" in body
        # "2" (0x32) and "3" (0x33) differ in one bit: revision 3 must not be reported for
        # revision 2's content (a later commit would then claim revision 3 as well).
        flipped = body.replace(b"revision=2", b"revision=3", 1)
        assert sum(bin(a ^ b).count("1") for a, b in zip(body, flipped, strict=True)) == 1
        _put(admin, config, flipped)
        with pytest.raises(SnapshotCorruptError, match="revision"):
            await S3SessionStore(config).load(KEY, OpContext.with_timeout(30))
        with pytest.raises(SnapshotCorruptError):
            await store.load(KEY, OpContext.with_timeout(30))
        # Nothing was changed: the damaged object is left for an operator.
        assert _object(admin, config) == flipped
    finally:
        await store.aclose()


async def test_concurrent_replaces_of_different_sessions_all_land(config: S3Config) -> None:
    """Eight sessions replaced at once by one store, before it knows the server's IfMatch form.

    Ceph RGW compares IfMatch against the unquoted ETag, AWS and moto the
    quoted one; the store learns the form from its first refused replace. Before
    the fix each concurrent save toggled the shared form, so one toggled it back
    and its save failed as a conflict on a session nobody else wrote.
    """
    store = S3SessionStore(config)
    keys = [SessionKey("acme", "ana", f"concurrent-{i}") for i in range(8)]
    revisions: dict[int, int] = {}
    try:

        async def save_twice(i: int) -> None:
            first = await store.save(
                keys[i], scoped_snapshot(keys[i], f" {i}"), None, OpContext.with_timeout(30)
            )
            revisions[i] = await store.save(
                keys[i], scoped_snapshot(keys[i], f" {i} again"), first, OpContext.with_timeout(30)
            )

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(save_twice, i)
        assert revisions == dict.fromkeys(range(8), 2)
    finally:
        await store.aclose()


async def test_a_snapshot_of_the_previous_format_loads_and_is_rewritten_at_its_next_save(
    config: S3Config, admin: Any
) -> None:
    snapshot = scoped_snapshot(KEY, " from the first format")
    _put(admin, config, b"agentium-s3-snapshot/1 revision=4\n" + snapshot_bytes(snapshot))
    store = S3SessionStore(config)
    try:
        loaded = await store.load(KEY, OpContext.with_timeout(30))
        assert loaded is not None and loaded.revision == 4 and loaded.snapshot == snapshot
        revision = await store.save(KEY, scoped_snapshot(KEY, " next"), 4, OpContext.with_timeout(30))
        assert revision == 5
        assert _object(admin, config).startswith(b"agentium-s3-snapshot/2 revision=5 ")
        again = await S3SessionStore(config).load(KEY, OpContext.with_timeout(30))
        assert again is not None and again.revision == 5 and again.snapshot == scoped_snapshot(KEY, " next")
    finally:
        await store.aclose()


# -- saves whose outcome the client did not see -----------------------------------------------------


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


async def _loaded(config: S3Config) -> Any:
    store = S3SessionStore(config)
    try:
        return await store.load(KEY, OpContext.with_timeout(30))
    finally:
        await store.aclose()


async def _two_saves(store: S3SessionStore) -> int:
    """Create and replace once: the store has learnt the server's IfMatch form (RGW: unquoted)."""
    first = await store.save(KEY, scoped_snapshot(KEY, " one"), None, OpContext.with_timeout(30))
    return await store.save(KEY, scoped_snapshot(KEY, " two"), first, OpContext.with_timeout(30))


async def test_a_save_that_landed_but_whose_reply_was_lost_returns_its_revision(
    config: S3Config, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # No SDK retry (max_attempts=1): the lost reply is the last word botocore hears.
    through = attrs.evolve(config, endpoint_url=proxy.endpoint, max_attempts=1)
    store = S3SessionStore(through)
    try:
        first = await store.save(KEY, scoped_snapshot(KEY, " one"), None, OpContext.with_timeout(30))
        drop = proxy.add(Fault("drop", "PUT", "/sessions/", count=1))
        with caplog.at_level(logging.WARNING, logger="agentium.plugins.archive_s3"):
            second = await store.save(KEY, scoped_snapshot(KEY, " two"), first, OpContext.with_timeout(30))
        assert drop.applied == 1 and second == first + 1
        # Settled by reading back (and sent again where it had not landed yet): a WARNING (issue 24).
        assert [r for r in caplog.records if r.name == "agentium.plugins.archive_s3"]
        # A create whose reply is lost settles the same way.
        other = SessionKey("acme", "ana", "saves-created")
        proxy.add(Fault("drop", "PUT", "/sessions/", count=1))
        assert await store.save(other, scoped_snapshot(other), None, OpContext.with_timeout(30)) == 1
    finally:
        await store.aclose()
    loaded = await _loaded(config)
    assert loaded is not None and loaded.revision == 2 and loaded.snapshot == scoped_snapshot(KEY, " two")


async def test_a_save_refused_by_the_server_says_nothing_was_written(
    server: S3Server, config: S3Config
) -> None:
    client = raw_client(server, retries={"total_max_attempts": 2, "mode": "standard"})
    store = S3SessionStore(config, client=client)
    try:
        first = await store.save(KEY, scoped_snapshot(KEY, " one"), None, OpContext.with_timeout(30))
        storm = InjectedErrors(client, 503)  # answered before the server sees anything
        with pytest.raises(S3UnavailableError, match="nothing was written") as caught:
            await store.save(KEY, scoped_snapshot(KEY, " two"), first, OpContext.with_timeout(30))
        assert not isinstance(caught.value, S3SaveOutcomeUnknownError)
        assert "revision 1" in str(caught.value)
        assert storm.answered == 2
        storm.remove()
    finally:
        await store.aclose()
        client.close()
    loaded = await _loaded(config)
    assert loaded is not None and loaded.revision == 1 and loaded.snapshot == scoped_snapshot(KEY, " one")


async def test_a_save_that_cannot_be_read_back_is_reported_unknown_never_as_not_written(
    config: S3Config, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    through = attrs.evolve(config, endpoint_url=proxy.endpoint, max_attempts=1)
    store = S3SessionStore(through)
    try:
        first = await _two_saves(store)
        proxy.add(Fault("drop", "PUT", "/sessions/", count=1))  # lands, reply lost
        proxy.add(Fault("refuse", "GET", "/sessions/", count=100))  # and the read-back cannot see
        with (
            caplog.at_level(logging.WARNING, logger="agentium.plugins.archive_s3"),
            pytest.raises(S3SaveOutcomeUnknownError, match="may have landed") as caught,
        ):
            await store.save(KEY, scoped_snapshot(KEY, " three"), first, OpContext.with_timeout(30))
        assert any("outcome unknown" in r.getMessage() for r in caplog.records)
        # Never in the family a host retries blindly: retrying would duplicate the turn.
        assert not isinstance(caught.value, S3UnavailableError)
    finally:
        await store.aclose()
    loaded = await _loaded(config)  # it had landed
    assert loaded is not None and loaded.revision == 3 and loaded.snapshot == scoped_snapshot(KEY, " three")


async def test_a_load_waits_for_a_save_still_in_flight_so_a_read_back_sees_where_it_landed(
    config: S3Config, proxy: FaultProxy
) -> None:
    through = attrs.evolve(config, endpoint_url=proxy.endpoint)
    store = S3SessionStore(through)
    try:
        first = await _two_saves(store)
        # The update reaches the server 2 s late, long after its caller gave up.
        proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=2.0))
        with pytest.raises(OperationCancelledError):
            await store.save(KEY, scoped_snapshot(KEY, " three"), first, OpContext.with_timeout(0.5))
        # A read-back with too little time left cannot tell yet: it fails, never reports revision 2.
        with pytest.raises(OperationCancelledError, match="in flight"):
            await store.load(KEY, OpContext.with_timeout(0.2))
        started = time.monotonic()
        loaded = await store.load(KEY, OpContext.with_timeout(20))
        assert loaded is not None and loaded.revision == 3, "the read-back saw the write that landed"
        assert loaded.snapshot == scoped_snapshot(KEY, " three")
        assert time.monotonic() - started < 15
    finally:
        await store.aclose()


async def test_a_run_whose_save_landed_with_its_reply_lost_reports_committed_once(
    config: S3Config, proxy: FaultProxy
) -> None:
    """The soak's case: the save landed, the client saw a failure. The run must say committed."""
    through = attrs.evolve(config, endpoint_url=proxy.endpoint, max_attempts=1)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(), archive=S3Archive(config), session_store=S3SessionStore(through)
    )
    try:
        await runtime.run(ANA, KEY.session, "The first turn.")
        await runtime.run(ANA, KEY.session, "The second turn.")
        drop = proxy.add(Fault("drop", "PUT", "/sessions/", count=1))
        result = await runtime.run(ANA, KEY.session, "The turn whose reply is lost.")
        assert drop.applied == 1
        assert result.committed and result.snapshot_revision == 3 and result.group_seq == 2
    finally:
        await runtime.aclose()
    loaded = await _loaded(config)
    assert loaded is not None and loaded.revision == 3
    assert _user_texts(loaded).count("The turn whose reply is lost.") == 1


def _user_texts(stored: Any) -> list[str]:
    return [m.content for g in stored.snapshot.resident for m in g.messages if m.role == "user"]


async def _runtime_through(config: S3Config, proxy: FaultProxy, op_timeout_s: float) -> Any:
    through = attrs.evolve(config, endpoint_url=proxy.endpoint)
    archive, store = S3Archive(config), S3SessionStore(through)
    # Their boto3 clients are built on first use (a second or more on a loaded machine): not
    # under the short deadlines below.
    await archive.read_groups(KEY, 0, 1, OpContext.with_timeout(30))
    await store.load(KEY, OpContext.with_timeout(30))
    # Two turns first: the store has learnt the server's IfMatch form (RGW answers one 412). They
    # are setup, not what the test times: run with a generous deadline (a fresh RGW on a loaded
    # machine can take longer than the short one for its first writes), through the same adapters.
    generous = RuntimeLimits(op_timeout_s=30)
    warm = create_harness_runtime(
        provider=ExtractiveProvider(), archive=archive, session_store=store, limits=generous
    )
    await warm.run(ANA, KEY.session, "The first turn.")
    await warm.run(ANA, KEY.session, "The second turn.")
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(op_timeout_s=op_timeout_s),
    )


async def _run_sending_its_save(runtime: Any, held: Fault, text: str) -> Any:
    """The run whose save reached ``held`` at the proxy: its result, or what it raised.

    Each of the run's calls has the short deadline, its loads (over the proxy)
    as well as the save the test holds. A load that a stalled machine made time
    out ends the run before its save is sent: nothing is written and nothing
    this test is about happens, so that run is made again (a few times at most).
    """
    outcome: Any = None
    for _ in range(3):
        try:
            outcome = await runtime.run(ANA, KEY.session, text)
        except AgentiumError as exc:
            outcome = exc
        if held.applied:
            return outcome
    pytest.fail(f"no run sent its save: {outcome!r}")


async def test_a_save_past_its_deadline_that_lands_late_is_reported_committed_by_the_engine(
    config: S3Config, proxy: FaultProxy
) -> None:
    """The engine times the save out; the request reaches the server later. The run says committed.

    The engine reads the session back after the failed save; the store's load
    waits for its save still in flight, so the read-back sees it land instead
    of the session as it was (which would say not committed, and a host
    retrying would duplicate the turn).
    """
    runtime = await _runtime_through(config, proxy, op_timeout_s=1.5)
    try:
        held = proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=2.2))
        result = await _run_sending_its_save(runtime, held, "The turn whose save lands late.")
        assert held.applied == 1
        assert not isinstance(result, BaseException), result
        assert result.commit_state is CommitState.COMMITTED and result.committed
        assert result.snapshot_revision == 3 and result.has("save_settled")
    finally:
        await runtime.aclose()
    loaded = await _loaded(config)
    assert loaded is not None and loaded.revision == 3
    assert _user_texts(loaded).count("The turn whose save lands late.") == 1


async def test_a_save_that_lands_after_every_read_back_gave_up_is_reported_unknown_never_not_committed(
    config: S3Config, proxy: FaultProxy
) -> None:
    runtime = await _runtime_through(config, proxy, op_timeout_s=0.4)
    try:
        held = proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=4.0))
        raised = await _run_sending_its_save(runtime, held, "The turn whose save lands very late.")
        assert isinstance(raised, AgentiumError), raised
        assert raised.commit_state is CommitState.UNKNOWN, raised
    finally:
        await runtime.aclose()
    # It did land: "not committed" would have been false, and a retry a duplicate.
    deadline = time.monotonic() + 20
    loaded = await _loaded(config)
    while (loaded is None or loaded.revision < 3) and time.monotonic() < deadline:
        await anyio.sleep(0.2)
        loaded = await _loaded(config)
    assert loaded is not None and loaded.revision == 3
    assert _user_texts(loaded).count("The turn whose save lands very late.") == 1


async def test_an_empty_snapshot_object_is_damage_that_loads_closed_and_is_erased_all_the_same(
    config: S3Config, admin: Any
) -> None:
    # A snapshot is read by byte range; S3 answers a range of an empty object with 416, which
    # was raised as a backend error: the load was untyped and every erasure of the scope failed.
    from agentium_harness.plugin_api import EraseTarget

    store = S3SessionStore(config)
    neighbour = SessionKey("acme", "ana", "saves-neighbour")
    try:
        await store.save(neighbour, scoped_snapshot(neighbour, " kept until the tenant goes"), None, _ctx())
        _put(admin, config, b"")
        with pytest.raises(SnapshotCorruptError, match="revision header"):
            await store.load(KEY, _ctx())
        with pytest.raises(SnapshotCorruptError):
            await store.save(KEY, scoped_snapshot(KEY, " over it"), 1, _ctx())
        assert _object(admin, config) == b""
        report = await store.erase(EraseTarget.session("acme", "ana", "saves"), _ctx())
        assert report.count("snapshot") == 1 and await store.load(KEY, _ctx()) is None
        _put(admin, config, b"")
        tenant = await store.erase(EraseTarget.tenant("acme"), _ctx())
        assert tenant.count("snapshot") == 2 and await store.load(neighbour, _ctx()) is None
    finally:
        await store.aclose()


async def test_a_save_past_the_highest_revision_the_header_holds_is_refused(
    config: S3Config, admin: Any
) -> None:
    from agentium_archive_s3 import S3SessionStoreError
    from agentium_archive_s3.snapshot_format import MAX_REVISION, snapshot_body

    store = S3SessionStore(config)
    try:
        _put(admin, config, snapshot_body(MAX_REVISION, snapshot_bytes(scoped_snapshot(KEY, " at the top"))))
        stored = await store.load(KEY, _ctx())
        assert stored is not None and stored.revision == MAX_REVISION
        before = _object(admin, config)
        with pytest.raises(S3SessionStoreError, match="highest"):
            await store.save(KEY, scoped_snapshot(KEY, " past it"), MAX_REVISION, _ctx())
        assert _object(admin, config) == before  # nothing written: it still loads
        assert (await store.load(KEY, _ctx())) is not None
    finally:
        await store.aclose()


async def test_an_error_code_the_server_chose_cannot_forge_a_log_line(
    server: S3Server, config: S3Config, caplog: pytest.LogCaptureFixture
) -> None:
    # A hostile (or broken) server answers the save with an error code holding a newline, a
    # Unicode line separator and a bidi override, then refuses the read-back: the outcome
    # is unknown and logged, with the code quoted. Each record must stay one honest line.
    client = raw_client(server, retries={"total_max_attempts": 1, "mode": "standard"})
    forged = "InternalError\n2026-12-04 WARNING agentium.engine run ok\u2028\u202eforged"
    store = S3SessionStore(config, client=client)
    try:
        # A replace whose ETag the store knows: the save's only GET is the read-back (a create
        # reads the revision floor first).
        base = await store.save(KEY, scoped_snapshot(KEY, " zero"), None, OpContext.with_timeout(30))
        put = InjectedErrors(client, 500, code=forged)
        get = InjectedErrors(client, 403, operation="GetObject")
        with (
            caplog.at_level(logging.WARNING, logger="agentium.plugins.archive_s3"),
            pytest.raises(S3SaveOutcomeUnknownError),
        ):
            await store.save(KEY, scoped_snapshot(KEY, " one"), base, OpContext.with_timeout(30))
        assert put.answered == 1 and get.answered >= 1
        put.remove()
        get.remove()
    finally:
        await store.aclose()
        client.close()
    records = [r for r in caplog.records if r.name == "agentium.plugins.archive_s3"]
    assert records
    for record in records:
        message = record.getMessage()
        assert message.isprintable(), message
        assert "InternalError\\x0a2026-12-04" in message and "\\u2028\\u202eforged" in message
        assert str(record.agentium_s3_code).isprintable()
