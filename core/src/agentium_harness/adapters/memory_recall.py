"""An in-process recall store for tests and development (not durable).

``InMemoryRecallStore`` follows the same rules as the SQLite recall store:
sources are owned by a :class:`~agentium_harness._ports.recall.SourceOwner`,
ids are :func:`~agentium_harness._ports.recall.document_source_id` and
:func:`~agentium_harness._ports.recall.group_source_id`, revisions are content
digests, excerpts come from the shared excerpt rules, and archived groups are
kept as canonical bytes checked against the archive's receipt digests.
Ranking is a plain term-frequency × inverse-document-frequency score over the
visible sources; discovery scans the index, so it is meant for small data.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from typing import ClassVar

import attrs

from .._codec import canonical_json, digest_of, unstructure
from .._errors import InvalidArgumentError
from .._history import MessageGroup, estimate_tokens
from .._ports import OpContext
from .._ports.archive import ArchiveReceipt, checked_index_batch, decode_archived_group
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseStatus,
    EraseTarget,
    check_max_items,
    check_target,
    count_items,
    group_sessions,
)
from .._ports.recall import (
    Candidate,
    Excerpt,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    document_source_id,
    group_source_id,
    indexed_group_text,
    source_owner,
)
from .._ports.recall_args import (
    checked_argument,
    checked_count,
    checked_ctx,
    checked_key,
    checked_owner,
    checked_query,
    checked_refs,
    checked_sequence,
)
from .._scope import Scope, SessionKey
from .._validators import validate_id
from ._excerpts import make_excerpt, query_terms

__all__ = ["InMemoryRecallConfig", "InMemoryRecallSession", "InMemoryRecallStore"]

_WORD = re.compile(r"\w+")


@attrs.frozen(slots=True)
class InMemoryRecallConfig:
    """The in-memory recall store has no options."""


@attrs.frozen(slots=True)
class _Source:
    owner: SourceOwner
    revision: str
    title: str
    text: str
    terms: dict[str, int]
    seq: int | None = None
    canonical: bytes | None = None


def _terms(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in _WORD.findall(text.lower()):
        counts[word] = counts.get(word, 0) + 1
    return counts


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}; nothing was written")
    return value


class InMemoryRecallSession(RecallSession):
    """A recall session over an :class:`InMemoryRecallStore`, confined to one scope."""

    def __init__(self, store: InMemoryRecallStore, scope: Scope) -> None:
        self._store = store
        self._scope = scope
        self._terms: tuple[str, ...] = ()
        self._closed = False

    def _check(self, ctx: OpContext, operation: str) -> None:
        checked_ctx(ctx, operation)
        if self._closed:
            raise InvalidArgumentError(f"{operation} on a closed recall session")
        ctx.raise_if_expired(operation)

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """Visible sources ranked by tf × idf over the query's terms, best first, within the byte budget."""
        self._check(ctx, "recall discover")
        terms = query_terms(checked_query(query, "recall discover"))
        max_candidates = checked_count(max_candidates, "max_candidates", "recall discover")
        self._terms = terms
        if not terms:
            return []
        visible = [(sid, s) for sid, s in self._store._snapshot() if s.owner.visible_to(self._scope)]
        n = len(visible) or 1
        df = {t: sum(1 for _, s in visible if t in s.terms) for t in terms}
        scored: list[tuple[float, str, _Source]] = []
        for sid, source in visible:
            score = sum(source.terms.get(t, 0) * math.log(1 + n / df[t]) for t in terms if df[t])
            if score > 0:
                scored.append((score, sid, source))
        scored.sort(key=lambda item: (-item[0], item[1]))
        out: list[Candidate] = []
        budget = ctx.remaining_bytes
        used = 0
        for score, sid, source in scored[: max(0, max_candidates)]:
            candidate = Candidate(
                SourceRef(sid, source.revision), source.owner, score, len(source.text.encode()), source.title
            )
            if budget is not None and used + candidate.discovery_bytes > budget:
                break
            used += candidate.discovery_bytes
            out.append(candidate)
        return out

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """One excerpt per visible ref still at its revision, within the excerpt cap and ctx's budgets."""
        self._check(ctx, "recall read")
        refs = checked_refs(refs, "recall read")
        max_excerpt_bytes = checked_count(max_excerpt_bytes, "max_excerpt_bytes", "recall read")
        out: list[Excerpt] = []
        used_bytes = used_tokens = 0
        for ref in refs:
            ctx.raise_if_expired("recall read")
            source = self._store._sources.get(ref.source_id)
            if source is None or source.revision != ref.revision or not source.owner.visible_to(self._scope):
                continue
            excerpt = make_excerpt(ref, source.owner, source.text, self._terms, max_excerpt_bytes)
            size, tokens = len(excerpt.text.encode()), estimate_tokens(excerpt.text)
            if ctx.remaining_bytes is not None and used_bytes + size > ctx.remaining_bytes:
                break
            if ctx.remaining_tokens is not None and used_tokens + tokens > ctx.remaining_tokens:
                break
            used_bytes += size
            used_tokens += tokens
            out.append(excerpt)
        return out

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """Current, changed, deleted, forbidden (decided from the id alone) or unknown, per ref."""
        self._check(ctx, "recall validate")
        refs = checked_refs(refs, "recall validate")
        out: list[Validation] = []
        for ref in refs:
            owner = source_owner(ref.source_id)
            if owner is None:
                out.append(Validation(ref, ValidationStatus.UNKNOWN))
            elif not owner.visible_to(self._scope):
                out.append(Validation(ref, ValidationStatus.FORBIDDEN))
            else:
                source = self._store._sources.get(ref.source_id)
                if source is None:
                    out.append(Validation(ref, ValidationStatus.DELETED))
                elif source.revision == ref.revision:
                    out.append(Validation(ref, ValidationStatus.CURRENT, source.revision))
                else:
                    out.append(Validation(ref, ValidationStatus.CHANGED, source.revision))
        return out

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """The same truthful answers as :meth:`validate` (the index is the current view)."""
        self._check(ctx, "recall validate_current")
        return await self.validate(refs, ctx)

    async def close(self) -> None:
        """Nothing is held; idempotent."""
        self._closed = True


class InMemoryRecallStore(RecallStore):
    """An in-process recall store declaring every recall capability; contents live as long as the object."""

    capabilities: ClassVar[RecallCapabilities] = RecallCapabilities(
        bounded_discovery=True,
        bounded_reads=True,
        revision_validation=True,
        bounded_current_validation=True,
        canonical_archive_reads=True,
        document_indexing=True,
        archive_indexing=True,
        erasure=True,
    )
    session_class: ClassVar[type[RecallSession]] = InMemoryRecallSession

    def __init__(self, config: InMemoryRecallConfig | None = None) -> None:
        self.config = config or InMemoryRecallConfig()
        self._sources: dict[str, _Source] = {}
        # A thread lock, not an anyio one: the store serves any thread's event loop (a runtime's runs
        # on several threads), and nothing awaits inside. Without it a discover, seek or erase
        # iterating the sources while another thread indexed a group failed ("dictionary changed
        # size during iteration").
        self._lock = threading.Lock()

    def _snapshot(self) -> list[tuple[str, _Source]]:
        """The sources as they are now (another thread may index or erase meanwhile)."""
        with self._lock:
            return list(self._sources.items())

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        """A session confined to ``scope``."""
        checked_ctx(ctx, "recall open").raise_if_expired("recall open")
        if not isinstance(scope, Scope):
            raise InvalidArgumentError(f"scope must be a Scope, got {type(scope).__name__}")
        return InMemoryRecallSession(self, scope)

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Add or replace a host document; its revision is a digest of its title and text."""
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        doc_id = validate_id(doc_id, "doc_id")
        text, title = _text(text, "text"), _text(title, "title")
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        sid = document_source_id(owner, doc_id)
        revision = digest_of({"title": title, "text": text})
        self._sources[sid] = _Source(owner, revision, title, text, _terms(f"{title}\n{text}"))
        return SourceRef(sid, revision)

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Remove a host document; ``True`` if it existed."""
        checked_ctx(ctx, "recall delete").raise_if_expired("recall delete")
        sid = document_source_id(checked_owner(owner, "recall delete"), doc_id)
        return self._sources.pop(sid, None) is not None

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        """Index archived groups under their receipts' digests; the whole batch is checked first."""
        checked_ctx(ctx, "recall index")
        key = checked_key(key, "recall index")
        checked_sequence(groups, "groups", "recall index")
        checked_sequence(receipts, "receipts", "recall index")
        rows: list[tuple[str, _Source]] = []
        for group, receipt in checked_index_batch(key, groups, receipts):
            canonical = canonical_json(unstructure(group))
            text = indexed_group_text(group)
            rows.append(
                (
                    group_source_id(key, group.seq),
                    _Source(
                        SourceOwner.of_session(key),
                        receipt.digest,
                        "",
                        text,
                        _terms(text),
                        group.seq,
                        canonical,
                    ),
                )
            )
        ctx.raise_if_expired("recall index")
        fresh = 0
        with self._lock:
            for sid, source in rows:
                fresh += self._sources.get(sid) != source
                self._sources[sid] = source
        return fresh

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int]:
        """Seqs from ``start_seq`` below ``end_seq`` with no indexed group of ``key``, ascending, bounded."""
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        key = checked_key(key, "recall index")
        end_seq = checked_count(end_seq, "end_seq", "recall index")
        max_groups = checked_count(max_groups, "max_groups", "recall index")
        start_seq = checked_count(start_seq, "start_seq", "recall index")
        missing: list[int] = []
        # Bounded by what is indexed plus max_groups, whatever end_seq says.
        for seq in range(max(0, start_seq), max(0, end_seq)):
            if len(missing) >= max_groups:
                break
            if group_source_id(key, seq) not in self._sources:
                missing.append(seq)
        return missing

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Drop the target's group entries and documents; at most ``max_items``."""
        check_target(target)
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "recall erase")
        bound = check_max_items(max_items)
        checked_ctx(ctx, "recall erase").raise_if_expired("recall erase")
        with self._lock:  # what is found is what is removed: no other thread's change in between
            found = sorted(sid for sid, source in self._sources.items() if self._covered(target, sid, source))
            taken = found[:bound]
            groups: list[tuple[SessionKey, int, str]] = []
            for sid in taken:
                source = self._sources[sid]
                if (
                    source.seq is not None
                    and source.owner.user is not None
                    and source.owner.session is not None
                ):
                    key = SessionKey(source.owner.tenant, source.owner.user, source.owner.session)
                    groups.append((key, source.seq, source.revision))
            if not dry_run:
                for sid in taken:
                    del self._sources[sid]
        return EraseReport(
            count_items(group=len(groups), document=len(taken) - len(groups)),
            group_sessions(groups),
            EraseStatus.PARTIAL if len(found) > bound else EraseStatus.COMPLETE,
        )

    @staticmethod
    def _covered(target: EraseTarget, source_id: str, source: _Source) -> bool:
        owner = source.owner
        if source.seq is None:
            return target.covers_owner(owner)
        if owner.user is None or owner.session is None:
            return False
        return target.covers_group(SessionKey(owner.tenant, owner.user, owner.session), source.seq)

    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Archived groups of ``key`` from ``start_seq``, ascending, decoded strictly, digests checked."""
        checked_ctx(ctx, "recall seek").raise_if_expired("recall seek")
        key = checked_key(key, "recall seek")
        start_seq = checked_count(start_seq, "start_seq", "recall seek")
        max_groups = checked_count(max_groups, "max_groups", "recall seek")
        owner = SourceOwner.of_session(key)
        found = sorted(
            (
                (s.seq, s)
                for _, s in self._snapshot()
                if s.seq is not None and s.owner == owner and s.seq >= start_seq
            ),
            key=lambda pair: pair[0],
        )
        out: list[MessageGroup] = []
        for seq, source in found[: max(0, max_groups)]:
            assert source.canonical is not None
            out.append(
                decode_archived_group(
                    key, seq, source.revision, source.canonical, f"indexed group {seq} of {key.key()}"
                )
            )
        return out
