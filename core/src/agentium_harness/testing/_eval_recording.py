"""Recording wrappers for the eval target: the real provider and recall store, their traffic noted.

The eval target builds each case's runtime over these wrappers. They pass
every call through unchanged and declare exactly the capabilities of what
they wrap (so the runtime's own checks see the real adapter's declaration);
while a :class:`Recorder` is ``active`` (the probe turn) they note the
candidates and excerpts the store returned to the engine and every model
request the engine sent. The wrappers never close what they wrap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._engine.build import create_harness_runtime
from .._engine.runtime import HarnessRuntime
from .._ports import OpContext
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse
from .._ports.recall import (
    Candidate,
    Excerpt,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
    Validation,
)
from .._scope import Scope, SessionKey
from ..eval._trace import BlockSeen, CandidateSeen, ExcerptSeen, RequestSeen

__all__ = ["Recorder", "candidates_seen", "excerpts_seen", "recording_runtime", "requests_seen"]


class Recorder:
    """What the wrappers saw while ``active`` (the probe turn only)."""

    def __init__(self) -> None:
        self.active = False
        self.candidates: list[object] = []
        self.excerpts: list[object] = []
        self.requests: list[ModelRequest] = []


class _ProbeProvider(ModelProvider):
    """Passes every request to the real provider; notes the probe turn's requests. Never closes it."""

    def __init__(self, inner: ModelProvider, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """The real provider's answer, unchanged."""
        if self._recorder.active:
            self._recorder.requests.append(request)
        return await self._inner.complete(request, ctx)

    async def health(self, ctx: OpContext) -> str:
        """The real provider's health check."""
        return str(await self._inner.health(ctx))


class _ProbeSession(RecallSession):
    """Passes every call to the real recall session; notes what discover and read returned."""

    def __init__(self, inner: RecallSession, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """The real session's candidates, unchanged."""
        found = await self._inner.discover(query, max_candidates, ctx)
        if self._recorder.active and isinstance(found, list | tuple):
            self._recorder.candidates.extend(found)
        return found

    async def discover_hybrid(
        self, query: str, vector: Any, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        """The real session's hybrid candidates, unchanged."""
        found = await self._inner.discover_hybrid(query, vector, max_candidates, ctx)
        if self._recorder.active and isinstance(found, list | tuple):
            self._recorder.candidates.extend(found)
        return found

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """The real session's excerpts, unchanged."""
        found = await self._inner.read(refs, max_excerpt_bytes, ctx)
        if self._recorder.active and isinstance(found, list | tuple):
            self._recorder.excerpts.extend(found)
        return found

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """The real session's validation."""
        return await self._inner.validate(refs, ctx)

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """The real session's current validation."""
        return await self._inner.validate_current(refs, ctx)

    async def close(self) -> None:
        """Close the real session."""
        await self._inner.close()


class _ProbeRecall(RecallStore):
    """Passes every call to the real recall store; its sessions note the probe's recall traffic."""

    session_class = _ProbeSession

    def __init__(self, inner: RecallStore, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    @property
    def inner(self) -> RecallStore:
        """The real store."""
        return self._inner

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        """A recording session over the real one."""
        return _ProbeSession(await self._inner.open(scope, limits, ctx), self._recorder)

    async def seek_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        """The real store's canonical reads."""
        return await self._inner.seek_groups(key, start_seq, max_groups, ctx)

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Index on the real store."""
        return await self._inner.index_document(owner, doc_id, text, ctx, title=title)

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Delete on the real store."""
        return await self._inner.delete_document(owner, doc_id, ctx)

    async def index_groups(self, key: SessionKey, groups: Any, receipts: Any, ctx: OpContext) -> int:
        """Index archived groups on the real store."""
        return await self._inner.index_groups(key, groups, receipts, ctx)

    async def index_vectors(self, vectors: Any, ctx: OpContext) -> int:
        """Store vectors on the real store."""
        return await self._inner.index_vectors(vectors, ctx)

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int] | None:
        """What the real store lacks of the archive (the engine's catch-up asks)."""
        return await self._inner.unindexed_groups(key, end_seq, max_groups, ctx, start_seq=start_seq)

    async def health(self, ctx: OpContext) -> str:
        """The real store's health check."""
        return await self._inner.health(ctx)

    async def erase(
        self, target: Any, ctx: OpContext, *, dry_run: bool = False, max_items: int = 1000
    ) -> Any:
        """Erase on the real store."""
        return await self._inner.erase(target, ctx, dry_run=dry_run, max_items=max_items)


_PROBE_CLASSES: dict[tuple[type, type], type] = {}


def _probe(base: type, inner: object, recorder: Recorder) -> Any:
    """A wrapper of ``inner`` whose class declares exactly the capabilities ``inner``'s class declares."""
    key = (base, type(inner))
    cls = _PROBE_CLASSES.get(key)
    if cls is None:
        cls = type(f"Recording{type(inner).__name__}", (base,), {"capabilities": type(inner).capabilities})  # type: ignore[attr-defined]
        _PROBE_CLASSES[key] = cls
    return cls(inner, recorder)


def recording_runtime(
    base: HarnessRuntime,
    recorder: Recorder,
    *,
    hooks: Any,
    session_store: Any = None,
    recall_budget: Mapping[str, Any] | None = None,
) -> HarnessRuntime:
    """A runtime over ``base``'s adapters (borrowed) and telemetry, its provider and recall recorded."""
    extra: dict[str, Any] = {}
    if base.recall is not None:
        limits = base.recall_limits
        if recall_budget:
            limits = attrs.evolve(limits, **recall_budget)
        extra.update(
            recall=_probe(_ProbeRecall, base.recall, recorder),
            recall_limits=limits,
            recall_policy=base.recall_policy,
        )
        if base.publication is not None:
            extra["publication"] = base.publication
    if base.summarizer is not None:
        extra.update(summarizer=base.summarizer, summary_limits=base.summary_limits)
    if base.verifier is not None:
        extra.update(
            verifier=base.verifier,
            completion_policy=base.completion_policy,
            evidence_limits=base.evidence_limits,
            verify_timeout_s=base.verify_timeout_s,
        )
    memory = getattr(base, "memory", None)
    if memory is not None:
        extra["memory"] = memory
    return create_harness_runtime(
        provider=_probe(_ProbeProvider, base.provider, recorder),
        archive=base.archive,
        session_store=session_store if session_store is not None else base.session_store,
        limits=base.limits,
        instructions=base.instructions,
        tools=base.tools,
        hooks=hooks,
        # The host's runtime's telemetry: a case's runs record where that runtime's do (their memory
        # calls too: inside this runtime's turn the shared manager follows it, and it sets nothing on it).
        telemetry=base.telemetry,
        **extra,
    )


def _seen_owner(item: object) -> SourceOwner | None:
    owner = getattr(item, "owner", None)
    return owner if isinstance(owner, SourceOwner) else None


def candidates_seen(raw: Sequence[object]) -> tuple[CandidateSeen, ...]:
    out = []
    for item in raw:
        ref = getattr(item, "ref", None)
        if isinstance(ref, SourceRef):
            out.append(CandidateSeen(ref.source_id, ref.revision, _seen_owner(item)))
    return tuple(out)


def excerpts_seen(raw: Sequence[object]) -> tuple[ExcerptSeen, ...]:
    out = []
    for item in raw:
        ref = getattr(item, "ref", None)
        if isinstance(ref, SourceRef):
            completeness = getattr(item, "completeness", "unknown")
            omitted = getattr(item, "omitted", ())
            out.append(
                ExcerptSeen(
                    ref.source_id,
                    _seen_owner(item),
                    str(getattr(item, "text", "")),
                    str(getattr(completeness, "value", completeness)),
                    tuple(sorted(str(getattr(o, "value", o)) for o in omitted)),
                )
            )
    return tuple(out)


def requests_seen(raw: Sequence[ModelRequest], probe: str) -> tuple[RequestSeen, ...]:
    out = []
    for request in raw:
        # Only the probe turn's own requests: a summary update running beside it asks about other text.
        if not any(m.content == probe for m in request.turn):
            continue
        blocks = tuple(BlockSeen(b.kind.value, b.source_id, b.content, b.attributes) for b in request.sources)
        out.append(RequestSeen(blocks, len(request.history)))
    return tuple(out)
