"""What a recall store said goes to the host whole, to telemetry only with capture, to the model never.

A round's problems quote what adapters wrote: a store's error text (a
server, a path, a damaged row's text) and, in a contract violation, the ids
a store returned, which may be another tenant's. The host gets them whole in
its own result (``RunResult.recall.violations``, the diagnostics). Logs and
spans carry a diagnostic's text only with content capture. The model's
``recall-status`` notice used to list them as they were, so the model could
repeat another scope's source id or the store's error to the user; it now
words them itself (the error's class, a count of violations), whatever the
capture setting: telemetry's opt-in does not change what the model reads.
``RunResult.recall.uncertainty`` is the same words: it is committed with the
turn (``retained.uncertainty``), where another scope's id may not go.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from _recall_support import ANA, Recording, Scripted, ScriptedSession, runtime, sid

from agentium_harness import (
    RecallLimits,
    ResidentLimits,
    RunResult,
    RuntimeLimits,
    Telemetry,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    Candidate,
    Excerpt,
    OpContext,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
)
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

#: What the store's error quotes: a server and a row, as a database driver's message would.
STORE_TEXT = "row 'payroll-2024' unreadable on db-internal.example:5432"
#: A source of another tenant a misbehaving store returns from discovery.
FOREIGN = sid("salaries-globex", SourceOwner("globex", "bob", "s9"))
CONTINUE = current_session_recall_policy(on_failed="continue", on_partial="continue")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _ReadFails(ScriptedSession):
    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        raise RuntimeError(STORE_TEXT)


class ReadFails(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _ReadFails:
        return _ReadFails(self)


class _Foreign(ScriptedSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        owner = SourceOwner("globex", "bob", "s9")
        return [Candidate(SourceRef(FOREIGN, "r1"), owner, 9.0, 10), *await super().discover(query, 8, ctx)]


class Foreign(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _Foreign:
        return _Foreign(self)


async def _run(store: Scripted, capture: bool = False) -> tuple[RunResult, Recording, SpanRecorder]:
    spans = SpanRecorder()
    rt, provider, _ = runtime(
        store,
        recall_policy=CONTINUE,
        telemetry=Telemetry(tracer_provider=spans.provider, capture_content=capture),
    )
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "when was the kettle descaled")
    return result, provider, spans


def _notice(provider: Recording) -> str:
    [request] = provider.requests
    [notice] = [b.content for b in request.sources if b.source_id == "recall-status"]
    return notice


def _request_text(provider: Recording) -> str:
    return "\n".join(b.render() for r in provider.requests for b in r.sources)


@pytest.mark.parametrize("capture", [False, True])
async def test_a_store_error_reaches_the_host_whole_and_the_model_by_its_class_only(capture: bool) -> None:
    result, provider, _ = await _run(ReadFails([("kettle", "the kettle was descaled in May")]), capture)
    assert result.recall is not None
    # The host's own result keeps the store's words; what is committed names the class.
    assert not any(STORE_TEXT in line for line in result.recall.uncertainty)
    assert any(STORE_TEXT in d.message for d in result.diagnostics if d.code == "recall_failed")
    # The model is told what failed, in the engine's words: with capture on just the same.
    notice = _notice(provider)
    assert "- recall failed: recall read failed: RuntimeError" in notice.splitlines()
    assert "payroll" not in _request_text(provider) and "db-internal" not in _request_text(provider)


async def test_an_id_of_another_scope_a_store_returned_reaches_the_host_but_never_the_model() -> None:
    result, provider, _ = await _run(Foreign([("kettle", "the kettle was descaled in May")]))
    assert result.recall is not None
    assert any(FOREIGN in v for v in result.recall.violations)
    assert not any("globex" in line for line in result.recall.uncertainty)
    # The visible source is still shown and cited by its id; the foreign one is counted, not named.
    assert sid("kettle") in _request_text(provider)
    assert "globex" not in _request_text(provider)
    assert "the recall store answered out of contract 1 time(s)" in _notice(provider)


class QueryFails(HashingEmbedder):
    """Embeds while the session is seeded; then raises, quoting its server, as the query is embedded."""

    failing = False

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        if self.failing:
            raise RuntimeError(STORE_TEXT)
        return await super().embed(texts, ctx)


async def test_an_embedder_error_reaches_the_host_whole_and_the_model_by_its_class_only(
    tmp_path: Path,
) -> None:
    store, embedder, provider = (
        SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "r.db"))),
        QueryFails(),
        Recording(),
    )
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        embedder=embedder,
        owned=(store,),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        recall_limits=RecallLimits(max_latency_s=30.0),
        recall_policy=CONTINUE,
    )
    async with rt:
        with anyio.fail_after(30):
            for turn in ("the kettle was descaled in May", "the boat is in the harbour", "noted"):
                await rt.run(ANA, "s1", turn)
            embedder.failing = True
            provider.requests.clear()
            result = await rt.run(ANA, "s1", "when was the kettle descaled")
    assert result.recall is not None
    assert not any(STORE_TEXT in line for line in result.recall.uncertainty)
    assert any(STORE_TEXT in d.message for d in result.diagnostics if d.code == "recall_embed_failed")
    assert "- recall partial: query embedding failed (EmbeddingError); discovery was lexical only" in (
        _notice(provider).splitlines()
    )
    assert "db-internal" not in _request_text(provider)


@pytest.mark.parametrize("capture", [False, True])
async def test_recall_findings_reach_spans_and_logs_only_with_capture(
    capture: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        result, _, spans = await _run(ReadFails([("kettle", "the kettle was descaled in May")]), capture)
    assert result.recall is not None and result.recall.status.value == "failed"
    logged = [r.getMessage() for r in caplog.records] + [
        str(v) for r in caplog.records for k, v in vars(r).items() if k.startswith("agentium")
    ]
    for said in (spans.carried(), logged):
        assert any(STORE_TEXT in s for s in said) is capture, said


class _Posing(str):
    """A source id equal to any other and hashed as the asked one: the text it holds is another scope's."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return hash(sid("kettle"))


class _PosingValidation(ScriptedSession):
    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return [Validation(SourceRef(_Posing(FOREIGN), r.revision), ValidationStatus.CHANGED) for r in refs]


class PosingValidation(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _PosingValidation:
        return _PosingValidation(self)


async def test_a_validation_for_another_scopes_id_posing_as_the_asked_one_is_a_violation_not_named() -> None:
    """``validate_current`` answered for an id whose text is another scope's, equal to the asked one by
    its own ``__eq__``: it answered nothing asked (a violation, counted), and the source it did not
    answer for is unknown; the notice names only the run's own source, the host sees plain text."""
    result, provider, _ = await _run(PosingValidation([("kettle", "the kettle was descaled in May")]))
    assert result.recall is not None
    assert "globex" not in _request_text(provider)
    assert "the recall store answered out of contract 2 time(s)" in _notice(provider)
    assert any(FOREIGN in v for v in result.recall.violations)
    [gone] = result.recall.invalidated
    assert type(gone.ref.source_id) is str and gone.ref.source_id == sid("kettle")
    assert gone.status is ValidationStatus.UNKNOWN


class _ForeignFirst(ScriptedSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        owner = SourceOwner("globex", "bob", "s9")
        mine = await super().discover(query, max_candidates - 1, ctx)
        return [Candidate(SourceRef(FOREIGN, "r1"), owner, 9.0, 10), *mine]


class ForeignFirst(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _ForeignFirst:
        return _ForeignFirst(self)


async def test_the_violation_count_keeps_its_place_among_more_problems_than_are_listed() -> None:
    """A round with more problems than it lists keeps the violations' line where the first one was found.

    The host's list has the violation first (discovery came before the sources left out), so the
    notice, which lists the same problems in its own words, says first that the store answered out
    of contract; appended last, the line was cut with the problems past the cap, and the model never
    told of it.
    """
    docs = [(f"kettle-{i}", f"the kettle note {i}") for i in range(40)]
    rt, provider, _ = runtime(
        ForeignFirst(docs),
        recall_policy=CONTINUE,
        recall_limits=RecallLimits(max_candidates=48, max_validations=2),
    )
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "when was the kettle descaled")
    assert result.recall is not None
    assert "not listed" in result.recall.uncertainty[-1]  # more problems than a round lists
    assert "answered out of contract 1 time(s)" in result.recall.uncertainty[0]
    assert FOREIGN in result.recall.violations[0]
    lines = _notice(provider).splitlines()
    assert lines[1] == (
        "- recall partial: the recall store answered out of contract 1 time(s); what it returned there "
        "was dropped"
    )
    assert "not listed" in lines[-1] and "globex" not in _request_text(provider)
