"""The memory manager: the host's calls on durable memory, its owned work and its drain (R36, R39, R40).

Nothing becomes memory unless the host calls :meth:`MemoryManager.remember`
(or :meth:`~MemoryManager.remember_with_result`) or configures an extractor;
correction and forgetting are host calls too. Every write is checked before
the store sees it (:func:`~agentium_harness._ports.memory.rejection_reason`
plus the host's own ``accept`` rule), runs under a deadline, and is
broadcast through the ``agentium_memory_event`` hook; a hook that raises is
isolated and reported in the acknowledgment's ``notes``.

Extraction and final writes run as named owned work; :meth:`MemoryManager.drain`
covers them and any :class:`~agentium_harness._engine.memory.work.WorkSource` handed
over with :meth:`MemoryManager.track` (a runtime's summary updates).

Its parts: :mod:`.base` (its state and bounded calls), :mod:`.writes`
(remember, correct, forget) and this module (reads, history ownership,
owned work and drain, close).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from ..._errors import (
    AgentCloseError,
    ExtractionConflictError,
    InvalidArgumentError,
    MemoryDrainError,
)
from ..._history import Message
from ..._observe import spans as observe
from ..._ports.memory import GroupRef, MemoryScope, StoredFact, check_at, check_limit
from ..._scope import SessionKey, validate_id
from ..._validators import check_duration
from ..lifecycle import close_owned
from ..memory_fence import write_span
from .answers import (
    check_owner_kind,
    check_work,
    checked_facts,
    checked_history,
    checked_listing,
    checked_scope,
)
from .base import HistoryOwner, call_extractor, fences_of, late_calls_of, telemetry_of, work_tracker
from .erasure_reading import ErasureReading, take_reading
from .events import announce_drained
from .extraction import start_extraction
from .extractor import MemoryExtractor
from .holders import work_owner
from .limits import MemoryLimits
from .selection import SelectionRequest, candidate_bound, checked_selection
from .work import CANCEL_GRACE_S, DrainResult, WorkSource
from .writes import MemoryWrites, forget_fact

__all__ = [
    "HistoryOwner",
    "MemoryExtractor",
    "MemoryLimits",
    "MemoryManager",
    "announce_drain",
    "call_extractor",
    "counted_listing",
    "fences_of",
    "forget_fact",
    "late_calls_of",
    "telemetry_of",
    "work_tracker",
]


class MemoryManager(MemoryWrites):
    """The host's handle on durable memory: remember, correct, forget, list, select, drain.

    ``store`` is borrowed unless ``owns_store`` is true (then :meth:`aclose`
    closes it). ``hooks`` broadcasts lifecycle events (the plugin registry);
    ``selection`` replaces the default :func:`recent_and_relevant`;
    ``extractor`` turns on extraction; ``accept`` adds the host's own rule.
    ``telemetry`` chooses where the spans of its calls go outside a runtime's
    operation (inside an operation of a runtime it was given to, its turn,
    ``forget`` or drain, they follow that runtime's; inside another runtime's,
    its own). Without it: the global OpenTelemetry providers under the
    default settings, inside another runtime's block or turn too. A runtime it
    is given to (``create_harness_runtime(memory=manager)``) never sets it, so
    a manager shared by tenants' runtimes records the host's own calls under
    no tenant's telemetry (:mod:`.limits`).
    """

    # -- reads ------------------------------------------------------------------------------

    async def list(self, scope: MemoryScope, limit: int = 50) -> tuple[StoredFact, ...]:
        """Up to ``limit`` current facts of ``scope``'s tenant and user, newest first (expired ones too).

        Whatever the store returns, each once, none forgotten through this manager (WARNING for the rest).
        """
        return (await self._listed(scope, limit))[0]

    async def _listed(self, scope: MemoryScope, limit: int) -> tuple[tuple[StoredFact, ...], int]:
        """:meth:`list`, and how many facts the store answered (``runtime.forget``: was it full?)."""
        self._check_open("list")
        scope, _ = checked_scope(scope), check_limit(limit)
        # Around the check: its drops are events.
        with write_span(self._telemetry, self, "memory list") as span:
            raw = await self._call("memory list", lambda ctx: self.store.list_facts(scope, limit, ctx))
            span.result(raw)
            facts = checked_facts(raw, scope, limit, "memory list")
            return checked_listing(facts, self._forgotten, "memory list"), len(facts)

    async def history(self, scope: MemoryScope, fact_id: str) -> tuple[StoredFact, ...]:
        """Every revision of ``fact_id``, oldest first (a forgotten fact's content reads empty).

        Revisions of another fact (or another tenant or user) from the store are a
        :class:`ContractViolationError`: ``runtime.forget`` erases what they cite.
        """
        self._check_open("history")
        scope = checked_scope(scope)
        fact_id = validate_id(fact_id, "fact id")
        raw = await self._call("memory history", lambda ctx: self.store.history(scope, fact_id, ctx))
        return checked_history(raw, scope, fact_id, "memory history")

    async def select(
        self, scope: MemoryScope, query: str, *, limit: int | None = None, at: datetime | None = None
    ) -> tuple[tuple[StoredFact, ...], tuple[tuple[str, str], ...]]:
        """The facts to inject for ``query`` in ``scope`` through the selection, checked; and those dropped.

        Bounded by ``limit`` (default ``limits.max_injected_facts``). Only
        current facts valid at ``at`` (default now) that ``scope`` sees are
        kept; every other fact examined is listed with why. Facts are examined in rank order,
        at most :func:`~.selection.candidate_bound` of ``limit``, until ``limit`` are kept.
        ``at`` must be ``None`` or a timezone-aware datetime
        (:class:`InvalidArgumentError` otherwise).
        """
        self._check_open("select")
        scope = checked_scope(scope)
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        bound = check_limit(limit if limit is not None else self.limits.max_injected_facts)
        checked = check_at(at)  # ``at=0`` is not "now": only None is
        when = checked if checked is not None else datetime.now(UTC)
        selection = self.selection
        candidates = candidate_bound(bound)  # refused facts leave their places to the next ones
        raw = await self._call(
            "memory select",
            lambda ctx: selection(SelectionRequest(self.store, scope, query, bound, when, ctx, candidates)),
        )
        kept, dropped = checked_selection(raw, scope, bound, when, self._forgotten, candidates=candidates)
        return tuple(kept), tuple(dropped)

    # -- history ownership (R37) ------------------------------------------------------------

    def claim_history(self, key: SessionKey, owner: HistoryOwner) -> None:
        """Record a claim of ``owner`` on session ``key``'s extraction; a claim of the other owner raises.

        The harness claims a session whose canonical history it owns; an
        agent with extraction claims its own. Both for one session would
        extract twice, so that is :class:`ExtractionConflictError`. Claims of
        the same owner are counted: each is released by its own
        :meth:`release_history`, and the session is free once all are.
        """
        check_owner_kind(owner)
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        with self._claims_lock:  # check and claim together: agents may be built on several threads
            held = self._claims.get(key)
            if held is not None and held[0] != owner:
                raise ExtractionConflictError(
                    f"session {key.session!r} of {key.tenant}/{key.user}: the harness owns its canonical "
                    "history and an agent also extracts memory from it; turn off the agent's extraction (or "
                    "use a separate session) so memory is not extracted twice"
                )
            self._claims[key] = (owner, 1 if held is None else held[1] + 1)

    def release_history(self, key: SessionKey, owner: HistoryOwner) -> bool:
        """Release one claim of ``owner`` on ``key``; True if there was one.

        Only a claim of ``owner`` is released: an agent that never claimed the
        session, closing, leaves the harness's claim in place.
        """
        check_owner_kind(owner)
        with self._claims_lock:
            held = self._claims.get(key)
            if held is None or held[0] != owner:
                return False
            if held[1] <= 1:
                del self._claims[key]
            else:
                self._claims[key] = (owner, held[1] - 1)
            return True

    # -- owned work -------------------------------------------------------------------------

    def start_work(self, name: str, kind: str, work: Callable[[], Awaitable[object]]) -> str:
        """Run ``work`` as named owned work (``kind``: ``extraction``, ``final-write``…) until drained."""
        self._check_open("owned work")
        check_work(name, kind, work)
        return self._work.start(name, kind, work, work_owner(self))  # a runtime's operation's: its work

    def track(self, source: WorkSource) -> None:
        """Cover another component's background work in every drain (``OwnedWorkSource(work)``)."""
        self._work.track(source)

    def running(self) -> tuple[str, ...]:
        """Names of the owned and tracked work running now."""
        return self._work.running()

    async def erasure_reading(self, scope: MemoryScope, *, sessions: Sequence[str]) -> ErasureReading:
        """Read the erasures now, as a host's own turn starts: pass it to :meth:`extract_in_background`.

        ``scope`` is the turn's tenant and user; ``sessions`` the 1 to
        ``MAX_PROVENANCE`` session ids whose groups the turn's extraction
        will read (its ``sources``' sessions; else :class:`InvalidArgumentError`,
        nothing read). Take it before the turn reads its history or memory:
        an erasure covering what the extraction reads (the fact it would
        write, or a group of its ``sources``: retention and
        ``forget(erase_sources=True)`` too) that begins after it — even one
        finished before the extraction starts — skips the extraction before
        its extractor call (:mod:`.erasure_reading`). One read of each
        session store fencing the manager (the built-in SQLite store answers
        one it knows unchanged without a read); none for a manager without
        one. A store that cannot be read raises its typed error (take none
        and extract without: only the erasures under way then are seen).
        The reading holds no content; only this manager accepts it.
        """
        self._check_open("erasure reading")
        with observe.using(self._telemetry, self):
            return await take_reading(self, scope, sessions)

    def extract_in_background(
        self,
        scope: MemoryScope,
        messages: Sequence[Message],
        name: str,
        *,
        sources: Sequence[GroupRef],
        reading: ErasureReading | None = None,
    ) -> str | None:
        """Start extraction of ``messages`` as owned work named ``name``; ``None`` without an extractor.

        Its arguments are checked first, with an extractor or without one
        (then a valid call starts nothing and returns ``None``): a bad one
        is :class:`InvalidArgumentError` either way, nothing started or written.
        ``messages`` is read once, up to ``MAX_APPEND_MESSAGES`` (one group's
        bound): more, or an iterable that raises, is refused the same way.

        ``sources`` are the groups ``messages`` are (1 to ``MAX_PROVENANCE``
        :class:`GroupRef`, else :class:`InvalidArgumentError` and nothing
        starts): each fact the extractor proposes cites them (its own
        citation is kept if it names only groups of ``sources``), so erasing
        their session removes it. Each fact is checked and written like a host's
        ``remember``; a rejected one is skipped (it never becomes memory; a
        WARNING on ``agentium.engine.memory`` and the span event
        ``agentium.memory.extraction_rejected`` say how many); the
        work fails, writing none, if the extractor raises, proposes more than
        ``max_extracted_facts``, a fact outside ``scope`` (another user, or a
        project or repository other than ``scope``'s when it names one), or
        one citing a group not in ``sources`` (:mod:`.extraction`).
        The extractor's call runs under the model deadline
        (:func:`.limits.model_timeout`: ``MemoryLimits.model_timeout_s``, else
        the runtime's whose operation starts it, else ``op_timeout_s``); the writes under ``op_timeout_s``.
        Just before it, the erasures under way in every session store fencing
        the manager are read: one covering ``scope``'s user or tenant, a
        session ``sources`` names, or some of the groups it names, skips the
        extraction (the work fails with ``ErasureInProgressError``; nothing
        is sent or written: :mod:`..extraction_fence`). With ``reading``
        (:meth:`erasure_reading`, taken as the host's turn started), one that
        began since, finished or not, skips it too (:mod:`.erasure_reading`).
        After its writes they are read again: an erasure of some of the
        groups ``sources`` names that began since (during the extractor
        call) makes it forget the facts it stored, and the work fails the same way.
        A reading this manager did not take, or took for another tenant or
        user or not for every session ``sources`` names, is
        :class:`InvalidArgumentError` and nothing starts.
        """
        return start_extraction(self, scope, messages, name, sources, None, reading)

    async def drain(self, timeout_s: float | None = None, *, grace_s: float | None = None) -> DrainResult:
        """Wait for all owned and tracked work, cancel what outlasts ``timeout_s``; say what happened (R40).

        Work started while the drain waits is waited for too. Cancelled work
        gets ``grace_s`` (default 2 s) to stop. Broadcasts a ``drained`` event.
        Raises :class:`MemoryDrainError` carrying the :class:`DrainResult` when
        any item failed or was cancelled.
        """
        timeout = self.limits.drain_timeout_s if timeout_s is None else timeout_s
        with observe.using(self._telemetry, self):
            result = await self._work.drain(timeout, CANCEL_GRACE_S if grace_s is None else grace_s)
        result = await self._announce_drain(result, self.limits.drain_timeout_s)
        if not result.ok:
            raise MemoryDrainError(f"memory drain: {result.describe()}", result)
        return result

    async def _announce_drain(self, result: DrainResult, timeout_s: float) -> DrainResult:
        """Broadcast the ``drained`` event (bounded by ``timeout_s``); hook failures go in ``notes``."""
        with observe.using(self._telemetry, self):
            return await announce_drained(self._hooks, result, timeout_s, self._telemetry)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Refuse further calls and close the store if owned (bounded). Call :meth:`drain` first.

        ``timeout_s`` follows the one duration rule (finite, above 0): else
        :class:`InvalidArgumentError`, and the manager stays open. A failing
        close of an owned store raises; calling again retries it.
        """
        check_duration(timeout_s, "timeout_s")
        self._closed = True
        if not self._owns_store:
            return
        # Its own operation: the store's close records under its telemetry, whatever block it is called in.
        with observe.using(self._telemetry, self):
            [(_, problem)] = await close_owned([self.store], timeout_s)
        if problem is not None:
            raise AgentCloseError([problem])
        self._owns_store = False


async def announce_drain(manager: MemoryManager, result: DrainResult, timeout_s: float) -> DrainResult:
    """Tell ``manager``'s hooks how a drain ended (bounded by ``timeout_s``), as its own drain does."""
    return await manager._announce_drain(result, timeout_s)


async def counted_listing(m: MemoryManager, scope: MemoryScope, n: int) -> tuple[Sequence[StoredFact], int]:
    """``m.list(scope, n)``, and how many facts the store answered (was its answer full?)."""
    return await m._listed(scope, n)
