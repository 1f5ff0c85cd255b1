"""The memory manager's writes: remember, correct and forget, each checked, fenced and announced.

The second part of :class:`~.manager.MemoryManager` (over
:class:`~.base.MemoryManagerBase`): every write is checked before the store
sees it (:func:`~agentium_harness._ports.memory.rejection_reason` plus the
host's own ``accept`` rule), fenced against erasures before and after
(:mod:`..memory_fence`), runs under a deadline, and is broadcast through the
``agentium_memory_event`` hook. A correction or forget re-checks the fact's
owner first (:meth:`MemoryWrites._check_owner`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ..._errors import InvalidArgumentError
from ..._errors_memory import MemoryRejectedError
from ..._observe import spans as observe
from ..._ports.memory import AckStatus, MemoryAck, MemoryEventKind, MemoryFact, MemoryScope, StoredFact
from ..._scope import validate_id
from ..late_calls import FactScope
from ..memory_fence import current_fences, fence_check, fence_confirm, late_take_back, write_span
from ..unexpected import WriteProgress, typed_unexpected
from .answers import MEMORY_WRITE, check_cap, checked_ack, checked_history, checked_scope
from .base import MemoryManagerBase

if TYPE_CHECKING:
    from .manager import MemoryManager

__all__ = ["MemoryWrites", "forget_fact"]


class MemoryWrites(MemoryManagerBase):
    """The writes of a :class:`~.manager.MemoryManager` (its second part)."""

    #: docs/api.md documents these methods with :class:`~.manager.MemoryManager` (testing._api_docs).
    __agentium_documented_mixin__ = True

    def _manager(self) -> MemoryManager:
        # The fences take the whole manager (this part is only ever one).
        return cast("MemoryManager", self)

    async def remember_with_result(self, fact: MemoryFact) -> MemoryAck:
        """Store ``fact`` and return the acknowledgment: stored, duplicate, or rejected with the reason (R39).

        A rejected fact writes nothing and broadcasts nothing.
        """
        self._check_open("remember")
        progress = WriteProgress()
        with typed_unexpected("memory remember", progress, MEMORY_WRITE):
            reason = self._reject_reason(fact)
            if reason is not None:
                return MemoryAck(AckStatus.REJECTED, reason=reason)
            manager = self._manager()
            with write_span(self._telemetry, self, "memory remember") as w:
                seen = await fence_check(current_fences(manager), fact.scope, fact.provenance)
                progress.saving()
                try:
                    raw = await self._call(
                        "memory remember",
                        lambda ctx: self.store.remember(fact, ctx),
                        writes=FactScope(fact.scope, fact.provenance),
                        on_late=late_take_back(seen, manager, fact.scope, "memory remember"),
                    )
                except MemoryRejectedError as exc:
                    # The store refused it: a failed write on its span (the type only, never the reason).
                    w.fail(observe.error_type(exc), exc)
                    return MemoryAck(AckStatus.REJECTED, reason=exc.reason)
                ack = await fence_confirm(seen, manager, fact.scope, checked_ack(raw, "memory remember"), w)
                progress.committed()  # acknowledged and kept (the fence took back none it refused)
                return await self._event(
                    MemoryEventKind.REMEMBERED, ack, fact.scope
                )  # a hook's failure: on w
        raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises

    async def remember(self, fact: MemoryFact) -> MemoryAck:
        """Like :meth:`remember_with_result`, but a rejection raises :class:`MemoryRejectedError`."""
        if (ack := await self.remember_with_result(fact)).status is AckStatus.REJECTED:
            raise MemoryRejectedError(ack.reason)
        return ack

    async def correct(self, scope: MemoryScope, fact_id: str, replacement: MemoryFact) -> MemoryAck:
        """Write ``replacement`` as the next revision of ``fact_id``, keeping the history.

        Raises :class:`MemoryRejectedError` for a replacement the checks
        refuse, :class:`MemoryFactNotFoundError` for a missing or foreign id
        (the same error either way) and :class:`MemoryFactForgottenError` for
        a forgotten fact; nothing changes in any of these cases. With a store
        declaring ``history``, the fact's revisions are read first and must be
        owned by ``scope`` (:class:`ContractViolationError` if the store
        returns another tenant's: its own check is wrong); a fact they show
        holding :data:`MAX_FACT_REVISIONS` revisions is refused with
        :class:`MemoryRejectedError` whatever the store would do.
        """
        self._check_open("correct")
        progress = WriteProgress()
        with typed_unexpected("memory correct", progress, MEMORY_WRITE):
            scope = checked_scope(scope)
            fact_id = validate_id(fact_id, "fact id")
            reason = self._reject_reason(replacement)
            if reason is not None:
                raise MemoryRejectedError(reason)
            if not scope.owns(replacement.scope):
                raise InvalidArgumentError("a correction stays with its tenant and user; nothing was written")
            revisions = await self._check_owner(scope, fact_id, "memory correct")
            check_cap(revisions, replacement)
            manager = self._manager()
            with write_span(self._telemetry, self, "memory correct") as w:
                seen = await fence_check(current_fences(manager), replacement.scope, replacement.provenance)
                progress.saving()
                raw = await self._call(
                    "memory correct",
                    lambda ctx: self.store.correct(scope, fact_id, replacement, ctx),
                    writes=FactScope(replacement.scope, replacement.provenance),
                    on_late=late_take_back(seen, manager, scope, "memory correct", fact_id),
                )
                acked = checked_ack(raw, "memory correct", fact_id)
                ack = await fence_confirm(seen, manager, scope, acked, w)
                progress.committed()
                return await self._event(MemoryEventKind.CORRECTED, ack, replacement.scope)
        raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises

    async def forget(self, scope: MemoryScope, fact_id: str) -> MemoryAck:
        """Tombstone ``fact_id`` and remove its content; it is never injected again.

        Raises :class:`MemoryFactNotFoundError` for a missing or foreign id (one message
        for both); nothing changes then. The owner is re-checked first as for :meth:`correct`.
        """
        self._check_open("forget")
        return await self._forget(scope, fact_id)

    async def _check_owner(self, scope: MemoryScope, fact_id: str, operation: str) -> tuple[StoredFact, ...]:
        """Before a change, the fact's revisions must be ``fact_id``'s, owned by ``scope`` (defence in depth).

        Like recall's owner check on every candidate: a store whose own check
        is wrong (keys joined from ids, so tenant ``a`` + user ``b/c`` is
        tenant ``a/b`` + user ``c``) must not let one tenant change another's
        fact. Needs ``history``; a store without it is trusted on its own
        check. A missing or foreign id is refused by the store's ``history``
        (``MemoryFactNotFoundError``); revisions of another tenant or user, or
        of another id, are a :class:`ContractViolationError`, and nothing is changed.
        Returns the revisions read (none without ``history``).
        """
        if not self.capabilities.history:
            return ()
        raw = await self._call(
            f"{operation} owner check", lambda ctx: self.store.history(scope, fact_id, ctx)
        )
        return checked_history(raw, scope, fact_id, f"{operation} owner check")

    async def _forget(self, scope: MemoryScope, fact_id: str) -> MemoryAck:
        """:meth:`forget` without the closed check (:func:`forget_fact`)."""
        progress = WriteProgress()
        with typed_unexpected("memory forget", progress, MEMORY_WRITE):
            scope = checked_scope(scope)
            fact_id = validate_id(fact_id, "fact id")
            with write_span(self._telemetry, self, "memory forget") as w:  # owner check, store call, hooks
                await self._check_owner(scope, fact_id, "memory forget")
                progress.saving()
                raw = await self._call("memory forget", lambda ctx: self.store.forget(scope, fact_id, ctx))
                # The store ran the forget: whatever its acknowledgment says, never inject the fact again.
                self._forgotten.add(fact_id)
                ack = checked_ack(raw, "memory forget", fact_id)
                w.result(ack)
                progress.committed()
                return await self._event(MemoryEventKind.FORGOTTEN, ack, scope)  # a hook's failure: on w
        raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def forget_fact(manager: MemoryWrites, scope: MemoryScope, fact_id: str) -> MemoryAck:
    """``manager.forget``, also once closed: the fence takes back a write that lands after the close."""
    return await manager._forget(scope, fact_id)
