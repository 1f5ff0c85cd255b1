"""The history API of :class:`~.runtime.HarnessRuntime`: use Agentium under an agent loop the host runs.

``append``, ``retract`` and ``reset_view`` write canonical history without a
model call, through the same admission, compare-and-set, eviction, receipts,
recall indexing and summary path as ``run()`` (:mod:`.history_write`);
``read_history`` and ``list_sessions`` read it back in bounded pages
(:mod:`.history_read`). The methods live here, mixed into the runtime, so
the orchestrator stays small; arguments are checked before anything is
admitted (:mod:`.history_checks`), and every error says in ``commit_state``
whether the operation committed. See docs/history-api.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from .._errors import AgentiumError, InvalidArgumentError
from .._history import Message
from .._observe.turn import traced_operation
from .._scope import RecallScope, Scope, SessionKey, VerifiedIdentity, require_identity
from .._validators import check_count, validate_id
from .arguments import run_scope
from .history_checks import (
    MAX_LIST_LIMIT,
    check_expected_revision,
    check_messages_encoded,
    check_page,
    check_reason,
    check_retract_count,
)
from .history_read import list_page, read_page
from .history_records import (
    AppendResult,
    HistoryPage,
    ReadFence,
    ResetResult,
    RetractResult,
    SessionPage,
)
from .history_write import append_group, reset_session_view, retract_messages
from .lifecycle import Ticket
from .progress import RunProgress, unexpected_error
from .read_fence import check_after_read
from .settle import mark_commit_state

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["HistoryOperations"]

R = TypeVar("R")


class HistoryOperations:
    """The history methods of the runtime (mixed into :class:`~.runtime.HarnessRuntime`)."""

    __slots__ = ()
    #: docs/api.md documents these methods with :class:`~.runtime.HarnessRuntime` (testing._api_docs).
    __agentium_documented_mixin__ = True

    def _runtime(self) -> HarnessRuntime:
        return cast("HarnessRuntime", self)

    async def _write(
        self,
        scope: Scope,
        kind: str,
        work: Callable[[HarnessRuntime, Ticket, RunProgress], Awaitable[R]],
    ) -> R:
        """Run ``work`` admitted exclusively on the session; errors marked with what was committed."""
        runtime = self._runtime()
        progress = RunProgress()
        key = scope.session_key
        # A span of its own (agentium.history.<kind>), parent of its load, commit and summary spans;
        # its diagnostics and its failure are logged and recorded as a run's are.
        operation = traced_operation(runtime, kind, key.tenant, key.user, key.session)
        with operation as span:
            try:
                async with runtime.parts.admission.admit(key, kind) as ticket:
                    result = ticket.report(await work(runtime, ticket, progress))
                operation.report(getattr(result, "diagnostics", ()))
                return result
            except Exception as exc:
                # One no stage typed (an engine bug) becomes an AgentiumError saying what was committed.
                typed = exc if isinstance(exc, AgentiumError) else unexpected_error(exc, progress, kind)
                state = typed.commit_state if typed.commit_state is not None else progress.commit_state
                span.set("agentium.commit_state", state.value)
                operation.failed(typed, state)
                try:
                    raise mark_commit_state(typed, state)  # the same error (or its typed form), marked
                finally:
                    del typed  # the error's traceback holds this frame: no cycle through the local
        raise AssertionError("unreachable")  # pragma: no cover - admit() re-raises a cancellation

    async def append(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        messages: Sequence[Message],
        *,
        recall_scope: RecallScope | None = None,
        expected_revision: int | None = None,
        after_read: HistoryPage | ReadFence | None = None,
    ) -> AppendResult:
        """Commit ``messages`` as the session's next group, with no model call.

        One call is one group, and the group must be complete: every tool call
        with its result after it, every tool result answering an earlier call
        of the same call's messages, and nothing but tool results between an
        assistant's tool calls and the last of their results (a model API
        refuses a request otherwise; :class:`IncompleteGroupError` for each).
        Tool calls only on assistant messages, and each tool call id once in
        the group, in one message or across steps (:class:`InvalidArgumentError`:
        ``run()`` sends the group on every later turn, and a model API refuses
        a request with two results of one id). Messages are checked and
        copied first: ``content`` valid text, tool
        arguments and ``payload`` plain JSON within their bounds
        (:class:`InvalidPayloadError`). ``expected_revision`` (0: the session
        must not exist yet) refuses the append with :class:`SessionConflictError`
        unless the session is at that revision. Admitted like a run (one
        operation per session: :class:`SessionBusyError` while a run, another
        append, a retraction or a reset holds it), and committed like one:
        eviction with archive receipts, compare-and-set, recall indexing of
        archived groups, the summary update. Refused input changes nothing;
        an error raised after loading carries ``commit_state``.

        ``after_read`` says the messages were made from a read of this
        session: the :class:`HistoryPage` ``read_history`` returned, or its
        ``read_fence``. If an erasure covering the session (its own, its
        user's or its tenant's) began or finished since that read, the
        append is refused with :class:`ErasedSinceReadError` (a
        :class:`SessionConflictError`; nothing written, a WARNING logged
        without content): read again rather than retry. An erasure
        from before the read does not refuse it (one an earlier version ran,
        with no join record, may, conservatively). A page of
        another session, or anything else, is refused with
        :class:`InvalidArgumentError`. See docs/runtime.md, "Erasure and writes".
        """
        checked, encoded = check_messages_encoded(messages)
        expected = check_expected_revision(expected_revision)
        scope = run_scope(identity, session_id, recall_scope)
        point = check_after_read(after_read, scope.session_key)
        return await self._write(
            scope,
            "append",
            lambda rt, ticket, progress: append_group(
                rt, ticket, progress, scope, checked, expected, encoded=encoded, after_read=point
            ),
        )

    async def read_history(
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
        """One page of the session's groups, newest first below ``before_seq``, returned oldest first.

        ``max_groups`` (1 to 1,000) and ``max_bytes`` (canonical bytes, 1 to
        256 MiB; a single group over it is refused, never cut) bound the page,
        and ``max_bytes`` what is read for it too (at most one group more);
        ``next_before_seq`` pages further back, over resident and archived
        history alike. With ``view=True`` only groups with a message in the
        session's view are returned, each with the indexes it shows; with
        ``view=False`` every group, control groups included, for audit.
        Archived groups are checked (seq, owner, receipt digest) and damage
        fails the read with a typed error (``ArchiveCorruptError``,
        ``SnapshotCorruptError``): nothing is skipped. A session that does not
        exist reads as empty. Admitted shared, like :meth:`inspect_session`.

        The page's messages and groups are the caller's own: their payloads
        and tool-call arguments are copies, made when first read, so changing
        them in place changes nothing the runtime holds. ``copy=False`` hands
        out the runtime's own objects instead (no copy), for a caller that
        never changes them, or copies what it keeps (the OpenAI Agents
        session does): a change made in place to one of those would change
        what later reads return and what ``run()`` sends to the model.
        """
        groups, size = check_page(max_groups, max_bytes)
        if not isinstance(view, bool):
            raise InvalidArgumentError(f"view must be True or False, not {view!r}")
        if not isinstance(copy, bool):
            raise InvalidArgumentError(f"copy must be True or False, not {copy!r}")
        key = SessionKey.of(require_identity(identity), session_id)
        runtime = self._runtime()
        # A span of its own (agentium.history.read), its adapter calls' parent, under the runtime's
        # Telemetry, as a write's; a read failing (closed on damage, a store's error) is a WARNING.
        operation = traced_operation(
            runtime, "history read", key.tenant, key.user, key.session, name="agentium.history.read"
        )
        with operation:
            try:
                async with runtime.parts.admission.admit_shared(key, "history read") as ticket:
                    return await read_page(
                        ticket,
                        archive=runtime.archive,
                        store=runtime.session_store,
                        key=key,
                        before_seq=before_seq,
                        max_groups=groups,
                        max_bytes=size,
                        view=view,
                        copy=copy,
                    )
            except Exception as exc:
                operation.failed(exc)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_sessions(
        self, identity: VerifiedIdentity, *, after: str | None = None, limit: int
    ) -> SessionPage:
        """One page of the identity's session ids, sorted by code point, after ``after``.

        ``limit`` is 1 to 1,000; ``next_after`` continues the listing. Needs a
        session store that declares ``listing`` (:class:`CapabilityError`
        otherwise). Only the identity's own sessions are ever listed.
        """
        who = require_identity(identity)
        count = check_count(limit, "limit", ceiling=MAX_LIST_LIMIT)
        if after is not None:
            after = validate_id(after, "after")
        runtime = self._runtime()
        # As a history read: its own span (no session: the conversation id hashes an empty one).
        operation = traced_operation(
            runtime, "session listing", who.tenant, who.user, "", name="agentium.history.list_sessions"
        )
        with operation:
            try:
                async with runtime.parts.admission.admit_shared(None, "session listing") as ticket:
                    return await list_page(ticket, runtime.session_store, who.tenant, who.user, after, count)
            except Exception as exc:
                operation.failed(exc)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def retract(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        count: int = 1,
        reason: str,
        recall_scope: RecallScope | None = None,
        expected_revision: int | None = None,
    ) -> RetractResult:
        """Take the last ``count`` messages of the session's view out of it; nothing is deleted.

        The unit is the message: a retraction takes the view's last ``count``
        messages, across groups if need be (``pop`` in an SDK is ``count=1``).
        It commits a control group naming them (a typed record in canonical
        history, never a deletion and never a message), and the result
        returns them as committed. A retraction that would reach past the
        view's start is refused (:class:`RetractionRefusedError`), and so is
        one that would add a retracted span to a view holding
        :data:`MAX_RETRACTION_SPANS` (:class:`RetractionLimitError`:
        ``reset_view`` starts the view afresh, with none). Retracted
        messages are not sent to the model by ``run()``, recall leaves out
        the groups they are in, and a summary that covered them starts again.
        The session keeps the scope it was stored with (``recall_scope``,
        when given, must match it). ``expected_revision`` refuses the
        retraction with :class:`SessionConflictError` unless the session is at
        that revision, as for :meth:`append`: a caller that read the messages
        it means to take (``read_history`` gives ``snapshot_revision``) takes
        exactly those. Admitted and committed like :meth:`append`.
        """
        n = check_retract_count(count)
        why = check_reason(reason)
        expected = check_expected_revision(expected_revision)
        scope = run_scope(identity, session_id, recall_scope)
        return await self._write(
            scope,
            "retraction",
            lambda rt, ticket, progress: retract_messages(
                rt,
                ticket,
                progress,
                scope,
                n,
                why,
                stored_scope=recall_scope is None,
                expected_revision=expected,
            ),
        )

    async def reset_view(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        reason: str,
        recall_scope: RecallScope | None = None,
        expected_revision: int | None = None,
    ) -> ResetResult:
        """Start the session's view afresh: nothing before the reset is shown; nothing is deleted.

        Commits a control group; the view starts after it (``clear`` in an
        SDK). Earlier groups stay canonical history: ``read_history(view=False)``
        reads them, ``run()`` no longer sends them, recall leaves them out, and
        a summary with text starts again. On a session that does not exist it
        commits the control group all the same (the session then exists).
        ``expected_revision`` refuses the reset with :class:`SessionConflictError`
        unless the session is at that revision, as for :meth:`retract`: a caller
        that read the view it means to clear (``read_history`` gives
        ``snapshot_revision``) never brings back a session an operator erased
        meanwhile (absent, it is at revision 0). Admitted and committed like
        :meth:`append`; the session keeps the scope it was stored with.
        """
        why = check_reason(reason)
        expected = check_expected_revision(expected_revision)
        scope = run_scope(identity, session_id, recall_scope)
        return await self._write(
            scope,
            "view reset",
            lambda rt, ticket, progress: reset_session_view(
                rt,
                ticket,
                progress,
                scope,
                why,
                stored_scope=recall_scope is None,
                expected_revision=expected,
            ),
        )
