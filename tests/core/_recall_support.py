"""A scriptable recall store for engine tests: it returns what a test stages, and records what it was asked.

Written as an adapter author would, from ``agentium_harness.plugin_api``; a
test subclasses it (or sets its fields) to misbehave in one exact way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio

from agentium_harness import SessionKey, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import (
    Candidate,
    Excerpt,
    ModelRequest,
    ModelResponse,
    OpContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    Scope,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    document_source_id,
)

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
MINE = SourceOwner("acme", "ana", "s1")


def sid(name: str, owner: SourceOwner = MINE) -> str:
    """The source id of host document ``name`` of ``owner``."""
    return document_source_id(owner, name)


class Recording(ExtractiveProvider):
    """The extractive provider, keeping every request it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.requests.append(request)
        return await super().complete(request, ctx)


class Scripted(RecallStore):
    """Discovers every staged document, reads it whole, validates from a per-call script.

    ``statuses[i]`` maps source ids to the status the i-th ``validate_current``
    call gives them (CURRENT when absent or past the script). It counts every
    validated ref, keeps each read's ``ctx.remaining_bytes`` and each
    discovery's time left (its context's deadline, as the discovery began),
    and the i-th discovery sleeps ``discover_sleeps_s[i]`` (none past the list).
    """

    capabilities: ClassVar[RecallCapabilities] = RecallCapabilities(
        bounded_discovery=True, bounded_reads=True, revision_validation=True, bounded_current_validation=True
    )

    def __init__(self, docs: Sequence[tuple[str, str]] = (), owner: SourceOwner = MINE) -> None:
        self.docs: dict[str, tuple[SourceOwner, str]] = {sid(n, owner): (owner, t) for n, t in docs}
        self.statuses: list[dict[str, ValidationStatus]] = []
        self.validate_calls = 0
        self.validated_refs = 0
        self.read_budgets: list[int | None] = []
        self.discover_sleeps_s: list[float] = []
        self.discover_time_left: list[float | None] = []
        self.queries: list[str] = []

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return ScriptedSession(self)

    def candidates(self) -> list[Any]:
        return [
            Candidate(SourceRef(s, "r1"), owner, 1.0 / (i + 1), len(text.encode()))
            for i, (s, (owner, text)) in enumerate(self.docs.items())
        ]

    def excerpts(self, refs: Sequence[SourceRef]) -> list[Any]:
        return [Excerpt(r, self.docs[r.source_id][0], self.docs[r.source_id][1]) for r in refs]

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        script = self.statuses[self.validate_calls] if self.validate_calls < len(self.statuses) else {}
        self.validate_calls += 1
        self.validated_refs += len(refs)
        return [Validation(r, script.get(r.source_id, ValidationStatus.CURRENT), r.revision) for r in refs]


class ScriptedSession(RecallSession):
    def __init__(self, store: Scripted) -> None:
        self.store = store

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        store, nth = self.store, len(self.store.queries)
        store.queries.append(query)
        store.discover_time_left.append(None if ctx.deadline is None else ctx.deadline - time.monotonic())
        if nth < len(store.discover_sleeps_s):
            await anyio.sleep(store.discover_sleeps_s[nth])
        return self.store.candidates()[:max_candidates]

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        self.store.read_budgets.append(ctx.remaining_bytes)
        return self.store.excerpts(refs)

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return self.store.validations(refs)

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return self.store.validations(refs)


def runtime(
    store: RecallStore, provider: Any = None, **kw: Any
) -> tuple[Any, Recording, InMemorySessionStore]:
    """A runtime over in-memory storage and ``store``; returns it, its provider and its session store."""
    provider = provider or Recording()
    sessions = InMemorySessionStore()
    rt = create_harness_runtime(
        provider=provider, archive=InMemoryArchive(), session_store=sessions, recall=store, **kw
    )
    return rt, provider, sessions


Scripted.session_class = ScriptedSession
