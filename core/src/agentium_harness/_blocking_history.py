"""The history and erasure API of :class:`~._blocking.BlockingRuntime`, blocking (docs/sync.md).

A synchronous host that runs its own agent loop writes and reads canonical
history (``append``, ``read_history``, ``list_sessions``, ``retract``,
``reset_view``: docs/history-api.md) and an operator erases
(``erase``, ``resume_erasures``, ``erasure_status``, ``apply_retention``,
``forget``: docs/erasure.md) and a host indexes its documents for recall
(``index_document``, ``delete_document``: docs/recall.md) from request
threads too. Each method here is
the blocking twin of the :class:`HarnessRuntime` coroutine of its name: the
same arguments, checked by that coroutine on the runtime's loop, so bad
input raises the same typed error and changes nothing, and the same result.
The methods live here, mixed into the facade, so ``_blocking`` stays small.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._engine.document_api import DocumentResult
from ._engine.erasure import ErasureResult, OperatorAttestation
from ._engine.erasure_status import DEFAULT_STATUS_LIMIT, ErasureStatusPage
from ._engine.forget import ForgetResult
from ._engine.history_records import (
    AppendResult,
    HistoryPage,
    ReadFence,
    ResetResult,
    RetractResult,
    SessionPage,
)
from ._engine.retention import RetentionResult
from ._engine.runtime import HarnessRuntime
from ._history import Message
from ._ports.erasure import EraseTarget
from ._ports.memory import MemoryScope
from ._ports.recall import SourceOwner
from ._scope import RecallScope, VerifiedIdentity

__all__ = ["BlockingHistoryOperations", "twin_of"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def twin_of(coroutine: Callable[..., Any]) -> Callable[[F], F]:
    """Give a blocking twin the documentation of ``coroutine`` after its own first line.

    The twin's docstring says which coroutine it blocks on; what the
    arguments mean, what is returned and what is raised is that coroutine's
    docstring, appended here rather than copied, so the two never disagree
    (docs/api.md shows both).
    """

    def attach(twin: F) -> F:
        own = inspect.cleandoc(twin.__doc__ or "")
        theirs = inspect.cleandoc(coroutine.__doc__ or "")
        twin.__doc__ = f"{own}\n\n{theirs}" if theirs else own
        return twin

    return attach


class BlockingHistoryOperations:
    """The history, erasure and document twins (mixed into :class:`~._blocking.BlockingRuntime`)."""

    __slots__ = ()
    #: docs/api.md documents these methods with :class:`~._blocking.BlockingRuntime` (testing._api_docs).
    __agentium_documented_mixin__ = True

    if TYPE_CHECKING:  # provided by BlockingRuntime; declared for the type checker only

        @property
        def runtime(self) -> HarnessRuntime: ...

        def _call_as(
            self, operation: str, func: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any
        ) -> T: ...

    # -- history (docs/history-api.md) -------------------------------------------------------------

    @twin_of(HarnessRuntime.append)
    def append(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        messages: Sequence[Message],
        *,
        recall_scope: RecallScope | None = None,
        expected_revision: int | None = None,
        after_read: HistoryPage | ReadFence | None = None,
    ) -> AppendResult:
        """:meth:`HarnessRuntime.append`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "append",
            self.runtime.append,
            identity,
            session_id,
            messages,
            recall_scope=recall_scope,
            expected_revision=expected_revision,
            after_read=after_read,
        )

    @twin_of(HarnessRuntime.read_history)
    def read_history(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        before_seq: int | None = None,
        max_groups: int,
        max_bytes: int | None = None,
        view: bool = True,
        copy: bool = True,
    ) -> HistoryPage:
        """:meth:`HarnessRuntime.read_history`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "read_history",
            self.runtime.read_history,
            identity,
            session_id,
            before_seq=before_seq,
            max_groups=max_groups,
            max_bytes=max_bytes,
            view=view,
            copy=copy,
        )

    @twin_of(HarnessRuntime.list_sessions)
    def list_sessions(
        self, identity: VerifiedIdentity, *, after: str | None = None, limit: int
    ) -> SessionPage:
        """:meth:`HarnessRuntime.list_sessions`, blocking (same arguments, result and typed errors)."""
        return self._call_as("list_sessions", self.runtime.list_sessions, identity, after=after, limit=limit)

    @twin_of(HarnessRuntime.retract)
    def retract(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        count: int = 1,
        reason: str,
        recall_scope: RecallScope | None = None,
        expected_revision: int | None = None,
    ) -> RetractResult:
        """:meth:`HarnessRuntime.retract`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "retract",
            self.runtime.retract,
            identity,
            session_id,
            count=count,
            reason=reason,
            recall_scope=recall_scope,
            expected_revision=expected_revision,
        )

    @twin_of(HarnessRuntime.reset_view)
    def reset_view(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        reason: str,
        recall_scope: RecallScope | None = None,
        expected_revision: int | None = None,
    ) -> ResetResult:
        """:meth:`HarnessRuntime.reset_view`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "reset_view",
            self.runtime.reset_view,
            identity,
            session_id,
            reason=reason,
            recall_scope=recall_scope,
            expected_revision=expected_revision,
        )

    # -- erasure (docs/erasure.md) ----------------------------------------------------------------

    @twin_of(HarnessRuntime.erase)
    def erase(
        self,
        target: EraseTarget,
        *,
        reason: str,
        attestation: OperatorAttestation,
        dry_run: bool = False,
    ) -> ErasureResult:
        """:meth:`HarnessRuntime.erase`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "erase", self.runtime.erase, target, reason=reason, attestation=attestation, dry_run=dry_run
        )

    @twin_of(HarnessRuntime.resume_erasures)
    def resume_erasures(self, attestation: OperatorAttestation) -> tuple[ErasureResult, ...]:
        """:meth:`HarnessRuntime.resume_erasures`, blocking (same arguments, result and typed errors)."""
        return self._call_as("resume_erasures", self.runtime.resume_erasures, attestation)

    @twin_of(HarnessRuntime.erasure_status)
    def erasure_status(
        self,
        attestation: OperatorAttestation,
        target: EraseTarget | None = None,
        *,
        after: str | None = None,
        limit: int = DEFAULT_STATUS_LIMIT,
    ) -> ErasureStatusPage:
        """:meth:`HarnessRuntime.erasure_status`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "erasure_status", self.runtime.erasure_status, attestation, target, after=after, limit=limit
        )

    @twin_of(HarnessRuntime.apply_retention)
    def apply_retention(
        self,
        attestation: OperatorAttestation,
        target: EraseTarget | None = None,
        *,
        reason: str = "retention policy",
        dry_run: bool = False,
    ) -> RetentionResult:
        """:meth:`HarnessRuntime.apply_retention`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "apply_retention",
            self.runtime.apply_retention,
            attestation,
            target,
            reason=reason,
            dry_run=dry_run,
        )

    @twin_of(HarnessRuntime.forget)
    def forget(
        self,
        scope: MemoryScope,
        fact_id: str,
        *,
        erase_sources: bool = False,
        reason: str | None = None,
        attestation: OperatorAttestation | None = None,
    ) -> ForgetResult:
        """:meth:`HarnessRuntime.forget`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "forget",
            self.runtime.forget,
            scope,
            fact_id,
            erase_sources=erase_sources,
            reason=reason,
            attestation=attestation,
        )

    # -- host documents for recall (docs/recall.md) ----------------------------------------------

    @twin_of(HarnessRuntime.index_document)
    def index_document(
        self,
        owner: SourceOwner,
        doc_id: str,
        text: str,
        *,
        title: str = "",
        timeout_s: float | None = None,
    ) -> DocumentResult:
        """:meth:`HarnessRuntime.index_document`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "index_document",
            self.runtime.index_document,
            owner,
            doc_id,
            text,
            title=title,
            timeout_s=timeout_s,
        )

    @twin_of(HarnessRuntime.delete_document)
    def delete_document(self, owner: SourceOwner, doc_id: str, *, timeout_s: float | None = None) -> bool:
        """:meth:`HarnessRuntime.delete_document`, blocking (same arguments, result and typed errors)."""
        return self._call_as(
            "delete_document", self.runtime.delete_document, owner, doc_id, timeout_s=timeout_s
        )
