"""Degraded outcomes that were only raised or returned: each a WARNING and a span event, never content.

Found by the observability audit: a history read or a session listing
failing closed on damage logged nothing (its only span was the failed
adapter call's, a root of its own); an erasure that removed groups whose
digest was damaged (erased unread, recorded with digest ``""``) said so only
in its record; an ``index_document`` whose vector was not stored logged a
WARNING but put nothing on its ``agentium.document.index`` span; a session
retention passed over, and a fact whose provenance cites a group by another
digest (``runtime.forget``), logged a WARNING with no span to put it on; an
erasure's dry run refusing a store's report (``ContractViolationError``)
said nothing. Each case
damages or breaks a real store (SQLite files), with a distinctive secret in
the message content that must appear in no log record and no span unless
the host opted in to content capture.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from _erasure_report_harness import BadReportArchive, with_groups
from _oversize_support import HUGE
from _oversize_support import raw_sql as _sql
from _telemetry_support import Telemetered

from agentium_harness import (
    ArchiveCorruptError,
    ContractViolationError,
    EraseTarget,
    GroupRef,
    HarnessRuntime,
    MemoryFact,
    MemoryScope,
    Message,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionKey,
    SnapshotCorruptError,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters import _sqlite_rows
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import OpContext, current_span_event
from agentium_harness.testing.sqlite_rows import group_row, set_group_row, set_snapshot_row, snapshot_row

pytestmark = pytest.mark.anyio

SECRET = "QZV-secret-7731"
ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _runtime(path: Path, t: Telemetered, capture: bool, **kw: Any) -> HarnessRuntime:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=archive,
        session_store=store,
        owned=(archive, store, *kw.pop("owned", ())),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        telemetry=t.telemetry(capture_content=capture),
        **kw,
    )


async def _seed(rt: HarnessRuntime) -> None:
    for n in range(5):  # groups 0-2 archived, 3 and 4 resident
        await rt.append(ANA, "s1", [Message(Role.USER, f"{SECRET} q{n}"), Message(Role.ASSISTANT, f"a{n}")])


async def _read_damaged_archive(path: Path, t: Telemetered, capture: bool) -> None:
    async with _runtime(path, t, capture) as rt:
        await _seed(rt)
        _, data = group_row(path, KEY, 1)
        set_group_row(path, KEY, 1, data.replace(f"{SECRET} q1".encode(), f"{SECRET} qX".encode()))
        t.exporter.clear()
        with pytest.raises(ArchiveCorruptError):
            await rt.read_history(ANA, "s1", max_groups=4)


async def _list_damaged_id(path: Path, t: Telemetered, capture: bool) -> None:
    async with _runtime(path, t, capture) as rt:
        await _seed(rt)
        # A session id changed behind the store's back, past the listing's bound, quoting content.
        _sql(path, "UPDATE sessions SET session_id = ? WHERE session_id = 's1'", (SECRET * 400,))
        t.exporter.clear()
        with pytest.raises(SnapshotCorruptError):
            await rt.list_sessions(ANA, limit=10)


async def _erase_damaged_digest(path: Path, t: Telemetered, capture: bool) -> None:
    async with _runtime(path, t, capture) as rt:
        await _seed(rt)
    [(sid,)] = _sql(path, "SELECT sid FROM sessions WHERE session_id = 's1'")
    assert isinstance(sid, int)
    ids = (_sqlite_rows.row_id(sid, 1, False), _sqlite_rows.row_id(sid, 1, True))
    _sql(path, "UPDATE groups SET digest = printf('%.*c', ?, 'x') WHERE id IN (?, ?)", (HUGE, *ids))
    async with _runtime(path, t, capture) as rt:
        t.exporter.clear()
        result = await rt.erase(
            EraseTarget.session("acme", "ana", "s1"), reason=f"asked {SECRET}", attestation=OPERATOR
        )
    assert result.tombstone is not None  # erased all the same: the degraded part is the damage


class _FailingEmbedder(HashingEmbedder):
    """Embeds nothing: its error quotes what it was given (an adapter may)."""

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        raise OSError(f"model server gone while embedding {texts[0][:40]}")


async def _index_unembedded(path: Path, t: Telemetered, capture: bool) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(path.with_name("recall.db"))))
    async with _runtime(path, t, capture, recall=recall, embedder=_FailingEmbedder(), owned=(recall,)) as rt:
        t.exporter.clear()
        result = await rt.index_document(SourceOwner("acme", "ana"), "doc1", f"{SECRET} is the door code")
    assert result.has("recall_embed_failed")


async def _retention_over_damage(path: Path, t: Telemetered, capture: bool) -> None:
    async with _runtime(path, t, capture, retention=RetentionPolicy(max_archived_groups=1)) as rt:
        await _seed(rt)
        row = snapshot_row(path, KEY)
        assert row is not None
        set_snapshot_row(path, KEY, row[1].replace(f"{SECRET} q4".encode(), f"{SECRET} qX".encode()))
        t.exporter.clear()
        result = await rt.apply_retention(OPERATOR)
    assert result.erasures == () and any("SnapshotCorruptError" in note for note in result.notes)


async def _forget_mismatched_provenance(path: Path, t: Telemetered, capture: bool) -> None:
    async with _runtime(path, t, capture, memory=InMemoryMemoryStore()) as rt:
        await _seed(rt)
        scope = MemoryScope("acme", "ana")
        cited = GroupRef("s1", 1, "sha256:" + "0" * 64)  # group 1 is stored, by another digest
        ack = await rt.memory.remember(MemoryFact(scope, f"{SECRET} likes tea", provenance=[cited]))
        assert ack.fact_id is not None
        t.exporter.clear()
        result = await rt.forget(scope, ack.fact_id)
    assert result.notes


async def _dry_run_refused(path: Path, t: Telemetered, capture: bool) -> None:
    # A store's dry-run report with a digest of another form (its text quotes content).
    archive = BadReportArchive(with_groups((7, f"sha256:{SECRET}")), "dry")
    store = InMemorySessionStore()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        telemetry=t.telemetry(capture_content=capture),
    )
    async with rt:
        await rt.run(ANA, "s1", f"{SECRET} turn")
        t.exporter.clear()
        with pytest.raises(ContractViolationError):
            target = EraseTarget.session("acme", "ana", "s1")
            await rt.erase(target, reason=f"asked {SECRET}", attestation=OPERATOR, dry_run=True)


def _damaged_snapshot(call: str) -> Scenario:
    """A maintenance call (``inspect_session``, ``migrate_legacy_session``, ``reconcile_session``) over a
    snapshot damaged in its file: it fails closed with SnapshotCorruptError."""

    async def scenario(path: Path, t: Telemetered, capture: bool) -> None:
        async with _runtime(path, t, capture) as rt:
            await _seed(rt)
            row = snapshot_row(path, KEY)
            assert row is not None
            set_snapshot_row(path, KEY, row[1].replace(f"{SECRET} q4".encode(), f"{SECRET} qX".encode()))
            t.exporter.clear()
            with pytest.raises(SnapshotCorruptError):
                await getattr(rt, call)(ANA, "s1")

    return scenario


class _WarmUpFails(HashingEmbedder):
    """A warm-up that raises, its error quoting text (an adapter's message is free text)."""

    async def warm_up(self, ctx: OpContext) -> None:
        raise RuntimeError(f"the model file is damaged near {SECRET}")


async def _warm_up_failed(path: Path, t: Telemetered, capture: bool) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(path.with_name("recall.db"))))
    rt = _runtime(path, t, capture, recall=recall, embedder=_WarmUpFails(), owned=(recall,))
    try:
        [diagnostic] = await rt.start()  # the first start warms (not `async with`: it starts the runtime)
    finally:
        await rt.aclose()
    assert diagnostic.code == "embedder_warm_up_failed" and SECRET in diagnostic.message  # the host's copy


class _Uncounting(SQLiteRecallStore):
    """Stores the vectors, then answers no count (a store that forgot its ``return``)."""

    async def index_vectors(self, *args: Any, **kwargs: Any) -> Any:
        await super().index_vectors(*args, **kwargs)
        return None


async def _index_uncounted(path: Path, t: Telemetered, capture: bool) -> None:
    recall = _Uncounting(SQLiteRecallConfig(path=str(path.with_name("recall.db"))))
    async with _runtime(path, t, capture, recall=recall, embedder=HashingEmbedder(), owned=(recall,)) as rt:
        t.exporter.clear()
        await rt.index_document(SourceOwner("acme", "ana"), "doc1", f"{SECRET} is the door code")


Scenario = Callable[[Path, Telemetered, bool], Awaitable[None]]
#: name: (scenario, logger of the WARNING, span that carries the event, event name, its attributes)
CASES: dict[str, tuple[Scenario, str, str, str, dict[str, Any]]] = {
    "history read, archive damaged": (
        _read_damaged_archive,
        "agentium.engine",
        "agentium.history.read",
        "exception",
        {"exception.type": "ArchiveCorruptError"},
    ),
    "session listing, id damaged": (
        _list_damaged_id,
        "agentium.engine",
        "agentium.history.list_sessions",
        "exception",
        {"exception.type": "SnapshotCorruptError"},
    ),
    "erasure, group digest damaged": (
        _erase_damaged_digest,
        "agentium.engine.erasure",
        "agentium.erasure",
        "agentium.erasure.damaged_erased",
        {"agentium.erasure.store": "archive", "agentium.erasure.groups": 1},
    ),
    "document index, vector not stored": (
        _index_unembedded,
        "agentium.engine.recall",
        "agentium.document.index",
        "agentium.diagnostic",
        {"agentium.diagnostic.code": "recall_embed_failed", "agentium.diagnostic.severity": "warning"},
    ),
    **{
        f"{call}, snapshot damaged": (
            _damaged_snapshot(call),
            "agentium.engine",
            span,
            "exception",
            {"exception.type": "SnapshotCorruptError"},
        )
        for call, span in (
            ("inspect_session", "agentium.inspection"),
            ("migrate_legacy_session", "agentium.migration"),
            ("reconcile_session", "agentium.reconciliation"),
        )
    },
    "start, embedder warm-up failed": (
        _warm_up_failed,
        "agentium.engine.recall",
        "agentium.embedder.warm-up",
        "exception",
        {"exception.type": "RuntimeError"},
    ),
    "document index, vectors not counted": (
        _index_uncounted,
        "agentium.engine.recall",
        "agentium.document.index",
        "agentium.recall.vectors_uncounted",
        {"agentium.recall.vectors": 1},
    ),
    "retention, session passed over": (
        _retention_over_damage,
        "agentium.engine.erasure",
        "agentium.retention",
        "agentium.retention.passed_over",
        {"error.type": "SnapshotCorruptError"},
    ),
    "forget, provenance by another digest": (
        _forget_mismatched_provenance,
        "agentium.engine.memory",
        "agentium.forget",
        "agentium.forget.provenance_mismatch",
        {"agentium.forget.groups": 1},
    ),
    "erasure dry run, report refused": (
        _dry_run_refused,
        "agentium.engine",
        "agentium.erasure.plan",
        "exception",
        {"exception.type": "ContractViolationError"},
    ),
}


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record's message and structured fields, as text."""
    return [r.getMessage() for r in caplog.records] + [
        str(v) for r in caplog.records for k, v in vars(r).items() if k.startswith("agentium")
    ]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_a_degraded_outcome_is_a_warning_and_a_span_event_without_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: tuple[Scenario, str, str, str, dict[str, Any]]
) -> None:
    scenario, logger, span_name, event, attributes = case
    t = Telemetered()
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        await scenario(tmp_path / "a.db", t, False)
    warnings = [r for r in caplog.records if r.name == logger and r.levelno >= logging.WARNING]
    assert warnings, [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    [span] = t.named(span_name)
    found = [dict(e.attributes or {}) for e in span.events if e.name == event]
    assert found and all(found[0].get(k) == v for k, v in attributes.items()), span.events
    for text in (*t.carried(), *_logged(caplog)):
        assert SECRET not in text, text


async def test_with_content_capture_the_diagnostic_text_is_on_the_span_and_in_the_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The same check sees content where the host opted in: the absence above is not for want of looking.
    t = Telemetered()
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        await _index_unembedded(tmp_path / "a.db", t, True)
    assert any(SECRET in text for text in t.carried())
    assert any(SECRET in text for text in _logged(caplog))


class _SettlingStore(InMemorySessionStore):
    """A store whose save says what a plugin's settled save says: a WARNING's event, on its call's span."""

    capabilities = InMemorySessionStore.capabilities

    async def save(self, *args: Any, **kwargs: Any) -> Any:
        revision = await super().save(*args, **kwargs)
        current_span_event("agentium.plugin.save_settled", {"error.type": "ConnectionResetError"})
        return revision


async def test_an_adapters_degraded_outcome_is_an_event_on_its_adapter_calls_span() -> None:
    # plugin_api.current_span_event: what a plugin (the S3 store's settled saves) adds next to its WARNING.
    t = Telemetered()
    store = _SettlingStore()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=InMemoryArchive(),
        session_store=store,
        telemetry=t.telemetry(),
    )
    async with rt:
        await rt.run(ANA, "s1", f"{SECRET} hi")
    [save] = t.named("agentium.session.save")
    assert [(e.name, dict(e.attributes or {})) for e in save.events] == [
        ("agentium.plugin.save_settled", {"error.type": "ConnectionResetError"})
    ]
