"""A fact judged by what it was derived from: its own erasures, and those of the groups it cites.

A groups erasure (retention, ``forget(..., erase_sources=True)``) takes no
fact (:meth:`EraseTarget.covers_fact`): the write fence lets a fact citing
erased groups stand. Where a fact is derived from groups with nobody left to
judge it otherwise — a host's extraction (:mod:`.erasure_reading`, before the
extractor call and after its writes), a write abandoned past its deadline
that lands later (:func:`..memory_fence.late_take_back`) — it is fenced as a
:class:`SourcesWrite`: an erasure covering the fact *or* one of its groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..._errors import ErasureInProgressError
from ..._ports.erasure import EraseTarget, ErasureRecord, ErasureState
from ..._ports.memory import GroupRef, MemoryScope
from ..._ports.sessions import SessionStore
from ..._scope import SessionKey
from ..erasure_fence import FenceCheck
from ..erasure_index import finished_covering, finished_covering_fact
from ..lifecycle import Ticket

__all__ = ["SourcesWrite", "sources_refusal", "with_sources"]


@attrs.frozen(slots=True)
class SourcesWrite:
    """A fact of ``scope`` derived from ``sources``, fenced: the fact, and the groups it cites (or reads)."""

    scope: MemoryScope
    sources: tuple[GroupRef, ...]

    @property
    def tenant(self) -> str:
        return self.scope.tenant

    @property
    def scopes(self) -> tuple[str, str | None, tuple[str, ...]]:
        return self.scope.tenant, self.scope.user, tuple(sorted({ref.session for ref in self.sources}))

    def covers(self, target: EraseTarget) -> bool:
        if target.covers_fact(self.scope, self.sources):
            return True
        # Some groups of a session (retention, a forgotten fact's sources): the fact would not be
        # scrubbed by it, but the extraction would hand its extractor the text it erased.
        return bool(target.groups) and any(
            target.covers_group(SessionKey(self.scope.tenant, self.scope.user, ref.session), ref.seq)
            for ref in self.sources
        )

    async def finished(self, ticket: Ticket, store: SessionStore) -> Sequence[ErasureRecord]:
        of_fact = await finished_covering_fact(ticket, store, self.scope, self.sources)
        found = {r.erasure_id: r for r in of_fact}
        for session in sorted({ref.session for ref in self.sources}):
            key = SessionKey(self.scope.tenant, self.scope.user, session)
            found.update((r.erasure_id, r) for r in await finished_covering(ticket, store, key))
        return tuple(r for r in found.values() if self.covers(r.target))

    def refusal(self, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
        return sources_refusal(record, outcome)


def sources_refusal(record: ErasureRecord, outcome: str) -> ErasureInProgressError:
    """An extraction refused by ``record`` (its fact's scope, or groups it reads), saying ``outcome``."""
    state = "was erased" if record.state is ErasureState.COMPLETE else "is being erased"
    where = f"{record.target.describe()}, erasure {record.erasure_id}"
    return ErasureInProgressError(
        f"what the extraction reads {state} ({where}); {outcome}",
        record.erasure_id,
    )


def with_sources(
    seen: Sequence[FenceCheck], scope: MemoryScope, provenance: Sequence[GroupRef]
) -> tuple[FenceCheck, ...]:
    """``seen`` (a write's first reads) read again as a :class:`SourcesWrite` of ``scope`` and ``provenance``.

    Same stores, revisions and times: an erasure of the fact or of a cited
    group pending later, or joined since those reads, is found
    (:meth:`..erasure_fence.ErasureFence.covering_since`); one that had
    finished before is not.
    """
    write = SourcesWrite(scope, tuple(provenance))
    return tuple(FenceCheck(check.fence, write, check.revision, check.at) for check in seen)
