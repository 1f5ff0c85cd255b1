"""A fact judged by what it was derived from: its own erasures, and those of the groups it cites.

A groups erasure (retention, ``forget(..., erase_sources=True)``) takes no
stored fact (:meth:`EraseTarget.covers_fact`: an erasure does not scrub the
facts citing the groups it erases). But a fact *written* while such an
erasure of a group it cites is under way, or began since the write's first
read, would be derived from text erased meanwhile. So every fenced write of
a fact judges it by both (:func:`covers_cited`, :func:`finished_cited`):
a ``remember`` or ``correct`` (:mod:`..memory_fence`: refused before the
write when one is pending, taken back after it, on time or landing late,
when one began since, :func:`cited_refusal`; a ``forget``'s only: retention
keeps derived facts, ``erasure_fence._counts``), and a host's extraction
(:mod:`.erasure_reading`, before the extractor call and after its writes),
fenced as a :class:`SourcesWrite`.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..._errors import ErasureInProgressError
from ..._observe import spans as observe
from ..._observe.turn import settings_of
from ..._ports.erasure import EraseTarget, ErasureRecord, ErasureState
from ..._ports.memory import GroupRef, MemoryScope
from ..._ports.sessions import SessionStore
from ..._scope import SessionKey
from ..erasure_index import finished_covering, finished_covering_fact
from ..lifecycle import Ticket

__all__ = [
    "SourcesWrite",
    "cited_refusal",
    "covers_cited",
    "fact_named",
    "finished_cited",
    "left_to_forget",
    "names_facts",
    "sources_refusal",
]


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

    #: Read by :meth:`..erasure_fence.ErasureFence.covering_since`: a groups erasure may take it.
    cites_groups = True

    def covers(self, target: EraseTarget) -> bool:
        return covers_cited(target, self.scope, self.sources)

    async def finished(self, ticket: Ticket, store: SessionStore) -> Sequence[ErasureRecord]:
        return await finished_cited(ticket, store, self.scope, self.sources)

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


def covers_cited(target: EraseTarget, scope: MemoryScope, sources: Sequence[GroupRef]) -> bool:
    """Whether ``target`` takes a fact of ``scope`` (:meth:`EraseTarget.covers_fact`) or a cited group.

    Without sources, the fact rule alone: nothing more is compared.
    """
    if target.covers_fact(scope, sources):
        return True
    # Some groups of a session (retention, a forgotten fact's sources): the fact would not be
    # scrubbed by it, but it was derived from (or its extraction would read) the text it erased.
    return bool(target.groups) and any(
        target.covers_group(SessionKey(scope.tenant, scope.user, ref.session), ref.seq) for ref in sources
    )


async def finished_cited(
    ticket: Ticket, store: SessionStore, scope: MemoryScope, sources: Sequence[GroupRef]
) -> tuple[ErasureRecord, ...]:
    """The finished erasures :func:`covers_cited` counts, every page of their chains read (the fallback)."""
    of_fact = await finished_covering_fact(ticket, store, scope, sources)
    found = {r.erasure_id: r for r in of_fact}
    for session in sorted({ref.session for ref in sources}):
        key = SessionKey(scope.tenant, scope.user, session)
        found.update((r.erasure_id, r) for r in await finished_covering(ticket, store, key))
    return tuple(r for r in found.values() if covers_cited(r.target, scope, sources))


def cited_refusal(record: ErasureRecord, outcome: str) -> ErasureInProgressError:
    """A ``remember`` or ``correct`` refused by ``record``, a groups erasure of a group its fact cites."""
    where = f"{record.target.describe()}, erasure {record.erasure_id}"
    if record.state is ErasureState.COMPLETE:
        said = f"a group the fact cites was erased while the fact was written ({where})"
    else:
        said = (
            f"a group the fact cites is being erased ({where}); a fact citing it is refused until the "
            "erasure completes (agentium erase --resume)"
        )
    return ErasureInProgressError(f"{said}; {outcome}", record.erasure_id)


def names_facts() -> bool:
    """Whether an error's text may name a fact (or host document) id: content capture on.

    (The operation's setting, else the defaults'.) Hosts log error texts, and an id is content,
    as in ``memory_refused``; the error's own attribute (``fact_ids``, ``fact_id``,
    ``source_ids``) holds the ids either way, for a caller to act on.
    """
    active = observe.live()
    return (active.settings if active is not None else settings_of(None)).capture_content


def fact_named(fact_id: str) -> str:
    """``fact <id>`` for the text of a take-back's refusal when :func:`names_facts`, else ``the fact``."""
    return f"fact {fact_id}" if names_facts() else "the fact"


def left_to_forget(refusal: ErasureInProgressError, fact_ids: Sequence[str]) -> ErasureInProgressError:
    """``refusal`` with ``fact_ids`` (facts a failed take-back left stored) as its ``fact_ids``.

    Returned, not held in a local: a raised error's traceback holds the raising frame (a reference cycle).
    """
    refusal.fact_ids = tuple(fact_ids)
    return refusal
