"""The harness runtime: admission, the turn, archive-before-commit, and session cleanup.

A turn, in order (see docs/runtime.md):

1. admit: a :class:`~agentium_harness.scope.VerifiedIdentity` only, one run per session;
2. load the revisioned snapshot and check its memory scope (R15);
3. build the request: host instructions, labeled source data, resident history, the input;
4. call the provider, run granted tools, repeat until the model answers;
5. commit: append the new group, archive the oldest complete groups over the
   resident bound, check every receipt, and only then save the snapshot with
   compare-and-set on its revision (R3).

A failure before the snapshot save leaves the session exactly as it was. An
archive failure defers eviction: the new group still commits, the boundary
does not move, and the next commit retries.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import anyio
import attrs

from ..errors import (
    CapabilityError,
    ContractViolationError,
    LegacySnapshotError,
    ProviderError,
    RuntimeClosedError,
    ScopeMismatchError,
    SessionBusyError,
    SnapshotCorruptError,
    ToolNotGrantedError,
)
from ..history import Message, MessageGroup, RetainedRecord, Role
from ..ports import OpContext
from ..ports.archive import ArchiveReceipt, HistoryArchive
from ..ports.memory import MemoryStore
from ..ports.provider import ModelProvider, ModelRequest, SourceBlock, Usage
from ..ports.recall import RecallCapabilities, RecallStore
from ..ports.sessions import SessionSnapshot, SessionStore, StoredSnapshot
from ..ports.summary import Summarizer
from ..ports.verify import CompletionVerifier
from ..scope import RecallScope, Scope, SessionKey, VerifiedIdentity, require_identity, validate_id
from .checks import check_adapter
from .limits import RuntimeLimits
from .resident import plan_eviction
from .results import (
    CleanupReport,
    CleanupStatus,
    Diagnostic,
    EvictionStatus,
    RunResult,
    RunStatus,
    Severity,
)
from .sources import assemble_sources
from .tools import ToolOutcome, ToolRegistry, ToolStatus

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "HarnessResources",
    "HarnessRuntime",
    "HookBroadcaster",
    "LifecycleState",
    "MigrationReport",
    "RuntimeLimits",
    "SessionView",
    "create_harness_runtime",
]

DEFAULT_INSTRUCTIONS = "You are a helpful assistant."


class HookBroadcaster(Protocol):
    """Anything that can broadcast a lifecycle hook and return the failures (the plugin registry)."""

    def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
        """Call every implementation of ``hook``; return one record per implementation that raised."""
        ...


class LifecycleState(enum.StrEnum):
    """Whether the runtime admits runs."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@attrs.frozen(slots=True)
class SessionView:
    """A read-only view of a stored session, for inspection."""

    exists: bool
    revision: int | None
    boundary: int
    next_seq: int
    resident_seqs: tuple[int, ...]
    archived_count: int
    memory_scope: Scope | None
    format_version: int | None


@attrs.frozen(slots=True)
class MigrationReport:
    """What a legacy-scope migration changed."""

    changed: bool
    previous_revision: int | None
    revision: int | None
    memory_scope: Scope | None
    message: str


@attrs.frozen(slots=True)
class _CommitOutcome:
    revision: int
    boundary: int
    resident: tuple[MessageGroup, ...]
    archived: tuple[ArchiveReceipt, ...]
    eviction: EvictionStatus
    diagnostics: tuple[Diagnostic, ...]


class HarnessResources:
    """Per-session resource management exposed as ``runtime.resources`` (R8)."""

    def __init__(self, runtime: HarnessRuntime) -> None:
        self._runtime = runtime

    async def close_session(self, identity: VerifiedIdentity, session_id: str) -> CleanupReport:
        """Settle admitted runs, flush deferred evictions and report what happened.

        Waits (bounded by ``settle_timeout_s``) for a run admitted on the
        session, then retries any eviction an archive failure deferred, closes
        per-session resources the runtime owns, and never closes borrowed
        clients. Safe to call more than once.
        """
        return await self._runtime._close_session(identity, session_id)


class HarnessRuntime:
    """The runtime built by :func:`create_harness_runtime` or ``load_runtime``.

    Adapters passed in are borrowed: the runtime never closes them. Adapters
    it built itself from config (``owned``) are closed by :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        provider: ModelProvider,
        archive: HistoryArchive,
        session_store: SessionStore,
        recall: RecallStore | None,
        summary: Summarizer | None,
        verifier: CompletionVerifier | None,
        memory: MemoryStore | None,
        limits: RuntimeLimits,
        instructions: str,
        tools: ToolRegistry,
        hooks: HookBroadcaster | None,
        owned: Sequence[object],
    ) -> None:
        self.provider = provider
        self.archive = archive
        self.session_store = session_store
        self.recall = recall
        self.summary = summary
        self.verifier = verifier
        self.memory = memory
        self.limits = limits
        self.instructions = instructions
        self.tools = tools
        self.resources = HarnessResources(self)
        self._hooks = hooks
        self._owned = tuple(owned)
        self._state = LifecycleState.OPEN
        # Sessions with an admitted run (or a close in progress), each with an
        # event set when it settles. Check-and-insert happens without an await
        # in between, so admission is atomic on the event loop.
        self._active: dict[SessionKey, anyio.Event] = {}
        self._cancel_scopes: dict[SessionKey, anyio.CancelScope] = {}

    # -- admission ---------------------------------------------------------

    @property
    def state(self) -> LifecycleState:
        """``open``, ``closing`` or ``closed``."""
        return self._state

    def _admit(self, key: SessionKey) -> anyio.Event:
        if self._state is not LifecycleState.OPEN:
            raise RuntimeClosedError(f"runtime is {self._state.value}; it admits no new runs")
        if key in self._active:
            raise SessionBusyError(
                f"session {key.session!r} already has an admitted run; one run per session at a time"
            )
        event = anyio.Event()
        self._active[key] = event
        return event

    def _release(self, key: SessionKey, event: anyio.Event) -> None:
        if self._active.get(key) is event:
            del self._active[key]
        event.set()

    def _ctx(self) -> OpContext:
        return OpContext.with_timeout(self.limits.op_timeout_s)

    # -- loading -----------------------------------------------------------

    async def _load(
        self, key: SessionKey, scope: Scope | None, *, attest_legacy: bool
    ) -> tuple[StoredSnapshot | None, SessionSnapshot]:
        """Load and check a snapshot. ``scope=None`` checks only the session identity."""
        stored = await self.session_store.load(key, self._ctx())
        if stored is None:
            return None, SessionSnapshot(memory_scope=scope)
        snap = stored.snapshot
        _check_snapshot_shape(key, snap)
        if snap.memory_scope is None:
            if scope is not None and not attest_legacy:
                raise LegacySnapshotError(
                    f"session {key.session!r} is a legacy snapshot without a memory scope; verify its "
                    "exact scope, then pass attest_legacy_memory_scope=True"
                )
        elif scope is not None and snap.memory_scope != scope:
            raise ScopeMismatchError(
                f"session {key.session!r} belongs to a different memory scope; refused "
                "(attestation cannot override a mismatched scope)"
            )
        elif scope is None and snap.memory_scope.session_key != key:
            raise ScopeMismatchError(f"session {key.session!r} is stored under a different identity")
        return stored, snap

    # -- the turn ------------------------------------------------------------

    async def run(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        user_input: str,
        *,
        recall_scope: RecallScope | None = None,
        attest_legacy_memory_scope: bool = False,
        grants: Iterable[str] = (),
        sources: Sequence[SourceBlock] = (),
    ) -> RunResult:
        """Run one turn for a verified identity on a session and commit it (R7).

        ``grants`` names the tools the model may run in this turn. ``sources``
        adds host-supplied labeled source data, assembled whole under the
        ``source_tokens`` budget. Raises a typed error and changes nothing
        when admission, loading, the provider or the snapshot save fails.
        """
        identity = require_identity(identity)
        validate_id(session_id, "session_id")
        if not isinstance(user_input, str):
            raise TypeError(f"user_input must be a string, got {type(user_input).__name__}")
        scope = Scope.of(identity, session_id, recall_scope)
        key = scope.session_key
        granted = frozenset(grants)
        event = self._admit(key)
        try:
            # The scope lets aclose() cancel a run that outlives the settle
            # timeout; cancelling is safe at any point because the archive is
            # written before the snapshot, which is saved last.
            with anyio.CancelScope() as cancel_scope:
                self._cancel_scopes[key] = cancel_scope
                return await self._run_admitted(
                    key, scope, user_input, attest_legacy_memory_scope, granted, sources
                )
            raise RuntimeClosedError(
                "the run was cancelled because the runtime closed; nothing was committed"
            )
        finally:
            self._cancel_scopes.pop(key, None)
            self._release(key, event)

    async def _run_admitted(
        self,
        key: SessionKey,
        scope: Scope,
        user_input: str,
        attest_legacy: bool,
        granted: frozenset[str],
        offered_sources: Sequence[SourceBlock],
    ) -> RunResult:
        stored, snap = await self._load(key, scope, attest_legacy=attest_legacy)
        diagnostics: list[Diagnostic] = []
        if snap.memory_scope is None:
            diagnostics.append(
                Diagnostic(
                    "legacy_scope_attested", "legacy snapshot loaded by attestation; stamped at commit"
                )
            )

        assembly = assemble_sources(offered_sources, self.limits.source_tokens)
        for source_id in assembly.omitted:
            diagnostics.append(
                Diagnostic(
                    "source_omitted",
                    f"source {source_id!r} did not fit the source budget whole and was omitted",
                    Severity.WARNING,
                )
            )
        history = tuple(m for g in snap.resident for m in g.messages)
        turn: list[Message] = [Message(Role.USER, user_input)]
        outcomes: list[ToolOutcome] = []
        usage_in = usage_out = 0
        status = RunStatus.STEP_LIMIT
        for _step in range(self.limits.max_steps):
            request = ModelRequest(
                instructions=self.instructions,
                sources=assembly.included,
                history=history,
                turn=tuple(turn),
                tools=self.tools.specs(granted),
            )
            try:
                response = await self.provider.complete(request, self._ctx())
            except Exception as exc:
                raise ProviderError(f"provider failed: {exc}; the session was not changed") from exc
            if not isinstance(getattr(response, "message", None), Message):
                raise ContractViolationError("provider returned something other than a ModelResponse")
            usage_in += response.usage.input_tokens or request.estimated_tokens
            usage_out += response.usage.output_tokens or response.message.estimated_tokens
            reply = attrs.evolve(response.message, role=Role.ASSISTANT)
            turn.append(reply)
            if not reply.tool_calls:
                status = RunStatus.COMPLETED
                break
            for call in reply.tool_calls:
                outcome, content = await self._run_tool(call.id, call.name, call.arguments, granted)
                outcomes.append(outcome)
                if outcome.status is not ToolStatus.OK:
                    diagnostics.append(Diagnostic("tool_refused", outcome.detail, Severity.WARNING))
                turn.append(Message(Role.TOOL, content, tool_call_id=call.id))
        if status is RunStatus.STEP_LIMIT:
            diagnostics.append(
                Diagnostic(
                    "step_limit", f"stopped after {self.limits.max_steps} model calls", Severity.WARNING
                )
            )

        retained = RetainedRecord(scope=scope, uncertainty=_uncertainty(assembly.omitted))
        group = MessageGroup(seq=snap.next_seq, messages=tuple(turn), retained=retained)
        resident = (*snap.resident, group)
        outcome_commit = await self._commit(
            key, scope, stored, resident, boundary=snap.boundary, next_seq=snap.next_seq + 1
        )
        diagnostics.extend(outcome_commit.diagnostics)
        output = next((m.content for m in reversed(turn) if m.role is Role.ASSISTANT), "")
        return RunResult(
            output=output,
            status=status,
            eviction=outcome_commit.eviction,
            sources=assembly.status,
            group_seq=group.seq,
            boundary=outcome_commit.boundary,
            resident_groups=len(outcome_commit.resident),
            snapshot_revision=outcome_commit.revision,
            archived=outcome_commit.archived,
            tool_outcomes=tuple(outcomes),
            usage=Usage(input_tokens=usage_in, output_tokens=usage_out),
            retained=retained,
            diagnostics=tuple(diagnostics),
        )

    async def _run_tool(
        self, call_id: str, name: str, arguments: dict[str, Any], granted: frozenset[str]
    ) -> tuple[ToolOutcome, str]:
        try:
            tool = self.tools.resolve(name, granted)
        except ToolNotGrantedError as exc:
            status = ToolStatus.REFUSED_UNKNOWN if name not in self.tools else ToolStatus.REFUSED_NOT_GRANTED
            detail = f"ToolNotGrantedError: {exc}"
            return ToolOutcome(call_id, name, status, None, detail), f"refused: {exc}"
        try:
            content = await tool.handler(arguments)
        except Exception as exc:  # a tool's failure is reported to the model, not raised
            detail = f"{type(exc).__name__}: {exc}"
            return ToolOutcome(call_id, name, ToolStatus.FAILED, tool.effect, detail), f"error: {detail}"
        return ToolOutcome(call_id, name, ToolStatus.OK, tool.effect), str(content)

    # -- commit ------------------------------------------------------------

    async def _commit(
        self,
        key: SessionKey,
        scope: Scope | None,
        stored: StoredSnapshot | None,
        resident: Sequence[MessageGroup],
        *,
        boundary: int,
        next_seq: int,
    ) -> _CommitOutcome:
        """Archive what is over the resident bound, then save the snapshot (compare-and-set)."""
        diagnostics: list[Diagnostic] = []
        plan = plan_eviction(resident, self.limits.resident)
        for seq in plan.oversized:
            diagnostics.append(
                Diagnostic(
                    "oversized_group",
                    f"group {seq} alone exceeds a resident bound; kept whole, never split",
                    Severity.WARNING,
                )
            )
        if plan.blocked_by_incomplete is not None:
            diagnostics.append(
                Diagnostic(
                    "eviction_blocked_incomplete",
                    f"group {plan.blocked_by_incomplete} is incomplete and cannot be archived; "
                    "eviction stopped there",
                    Severity.WARNING,
                )
            )
        keep: tuple[MessageGroup, ...] = tuple(resident)
        new_boundary = boundary
        receipts: tuple[ArchiveReceipt, ...] = ()
        eviction = EvictionStatus.NOT_NEEDED
        if plan.evict:
            try:
                receipts = await self._archive(key, plan.evict)
            except Exception as exc:
                eviction = EvictionStatus.DEFERRED
                code = (
                    "archive_contract_violation"
                    if isinstance(exc, ContractViolationError)
                    else "eviction_deferred"
                )
                diagnostics.append(
                    Diagnostic(
                        code,
                        f"eviction of {len(plan.evict)} group(s) deferred, boundary unchanged: "
                        f"{type(exc).__name__}: {exc}",
                        Severity.WARNING,
                    )
                )
            else:
                eviction = EvictionStatus.ARCHIVED
                keep = plan.keep
                new_boundary = plan.keep[0].seq if plan.keep else next_seq
        memory_scope = scope if scope is not None else (stored.snapshot.memory_scope if stored else None)
        snapshot = SessionSnapshot(
            memory_scope=memory_scope, boundary=new_boundary, next_seq=next_seq, resident=keep
        )
        revision = await self.session_store.save(
            key, snapshot, None if stored is None else stored.revision, self._ctx()
        )
        if receipts and self._hooks is not None:
            for failure in self._hooks.broadcast("agentium_groups_archived", key=key, receipts=receipts):
                diagnostics.append(Diagnostic("hook_failed", str(failure), Severity.WARNING))
        return _CommitOutcome(revision, new_boundary, keep, receipts, eviction, tuple(diagnostics))

    async def _archive(self, key: SessionKey, groups: Sequence[MessageGroup]) -> tuple[ArchiveReceipt, ...]:
        """Append and check every receipt; a wrong receipt is a contract violation, not trusted."""
        raw = await self.archive.append(key, groups, self._ctx())
        receipts = tuple(raw)
        if len(receipts) != len(groups):
            raise ContractViolationError(
                f"archive returned {len(receipts)} receipt(s) for {len(groups)} group(s)"
            )
        for group, receipt in zip(groups, receipts, strict=True):
            if not isinstance(receipt, ArchiveReceipt):
                raise ContractViolationError(
                    f"archive returned {type(receipt).__name__}, not an ArchiveReceipt"
                )
            if receipt.seq != group.seq or receipt.digest != group.digest:
                raise ContractViolationError(
                    f"archive receipt for group {group.seq} says seq {receipt.seq} digest {receipt.digest}; "
                    f"expected digest {group.digest}"
                )
        return receipts

    # -- inspection and migration -----------------------------------------

    async def inspect_session(self, identity: VerifiedIdentity, session_id: str) -> SessionView:
        """Boundary, resident groups, archived count and revision of a stored session (read-only)."""
        key = SessionKey.of(require_identity(identity), session_id)
        stored, snap = await self._load(key, None, attest_legacy=False)
        return SessionView(
            exists=stored is not None,
            revision=None if stored is None else stored.revision,
            boundary=snap.boundary,
            next_seq=snap.next_seq,
            resident_seqs=tuple(g.seq for g in snap.resident),
            archived_count=snap.boundary,
            memory_scope=snap.memory_scope,
            format_version=None if stored is None else snap.format_version,
        )

    async def migrate_legacy_session(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        recall_scope: RecallScope | None = None,
        attest_legacy_memory_scope: bool = False,
    ) -> MigrationReport:
        """Stamp a legacy snapshot with its verified memory scope (R15, R43).

        Requires the explicit attestation. A snapshot that already has a scope
        is left alone when it matches and refused when it differs.
        """
        scope = Scope.of(require_identity(identity), session_id, recall_scope)
        key = scope.session_key
        event = self._admit(key)
        try:
            stored, snap = await self._load(key, scope, attest_legacy=attest_legacy_memory_scope)
            if stored is None:
                return MigrationReport(False, None, None, None, "no stored session; nothing to migrate")
            if snap.memory_scope is not None:
                return MigrationReport(
                    False, stored.revision, stored.revision, snap.memory_scope, "already scoped; unchanged"
                )
            stamped = attrs.evolve(snap, memory_scope=scope)
            revision = await self.session_store.save(key, stamped, stored.revision, self._ctx())
            return MigrationReport(
                True, stored.revision, revision, scope, "legacy snapshot stamped with the attested scope"
            )
        finally:
            self._release(key, event)

    # -- cleanup -------------------------------------------------------------

    async def _close_session(self, identity: VerifiedIdentity, session_id: str) -> CleanupReport:
        key = SessionKey.of(require_identity(identity), session_id)
        diagnostics: list[Diagnostic] = []
        settled = unsettled = 0
        pending = self._active.get(key)
        if pending is not None:
            with anyio.move_on_after(self.limits.settle_timeout_s):
                await pending.wait()
            if pending.is_set():
                settled = 1
            else:
                unsettled = 1
                diagnostics.append(
                    Diagnostic(
                        "run_unsettled",
                        f"an admitted run did not settle within {self.limits.settle_timeout_s}s; "
                        "nothing was flushed",
                        Severity.ERROR,
                    )
                )
                return CleanupReport(CleanupStatus.INCOMPLETE, 0, 1, 0, 0, (), tuple(diagnostics))
        flushed = 0
        remaining = 0
        if key in self._active:
            # A new run was admitted while we waited; leave the session to it.
            unsettled += 1
            diagnostics.append(
                Diagnostic("run_admitted", "another run was admitted; not flushed", Severity.ERROR)
            )
        else:
            event = anyio.Event()
            self._active[key] = event
            try:
                flushed, remaining = await self._flush(key, diagnostics)
            except Exception as exc:
                diagnostics.append(Diagnostic("flush_failed", f"{type(exc).__name__}: {exc}", Severity.ERROR))
            finally:
                self._release(key, event)
        failed = any(d.severity is Severity.ERROR for d in diagnostics) or any(
            d.code in ("eviction_deferred", "archive_contract_violation") for d in diagnostics
        )
        report = CleanupReport(
            status=CleanupStatus.INCOMPLETE if failed else CleanupStatus.CLEAN,
            settled_runs=settled,
            unsettled_runs=unsettled,
            flushed_groups=flushed,
            remaining_resident=remaining,
            closed_resources=(),
            diagnostics=tuple(diagnostics),
        )
        if self._hooks is not None:
            failures = self._hooks.broadcast("agentium_session_closed", key=key, report=report)
            if failures:
                report = attrs.evolve(
                    report,
                    diagnostics=report.diagnostics
                    + tuple(Diagnostic("hook_failed", str(f), Severity.WARNING) for f in failures),
                )
        return report

    async def _flush(self, key: SessionKey, diagnostics: list[Diagnostic]) -> tuple[int, int]:
        """Retry deferred eviction for a session; return (groups flushed, groups still resident)."""
        stored, snap = await self._load(key, None, attest_legacy=False)
        if stored is None:
            diagnostics.append(Diagnostic("no_session", "no stored session; nothing to flush"))
            return 0, 0
        if snap.memory_scope is None:
            diagnostics.append(
                Diagnostic("legacy_not_flushed", "legacy snapshot without scope; migrate it before flushing")
            )
            return 0, len(snap.resident)
        plan = plan_eviction(snap.resident, self.limits.resident)
        if not plan.evict:
            return 0, len(snap.resident)
        outcome = await self._commit(
            key, snap.memory_scope, stored, snap.resident, boundary=snap.boundary, next_seq=snap.next_seq
        )
        diagnostics.extend(outcome.diagnostics)
        return len(outcome.archived), len(outcome.resident)

    async def probe(self) -> list[tuple[str, str]]:
        """Run each adapter's bounded health check, if it declares one: ``[(role, result)]``."""
        results: list[tuple[str, str]] = []
        for role, adapter in (
            ("archive", self.archive),
            ("session_store", self.session_store),
        ):
            caps = getattr(type(adapter), "capabilities", None)
            if getattr(caps, "health_check", False):
                try:
                    results.append((role, "ok: " + await adapter.health(self._ctx())))
                except Exception as exc:
                    results.append((role, f"failed: {type(exc).__name__}: {exc}"))
            else:
                results.append((role, "no health check declared"))
        return results

    async def aclose(self) -> None:
        """Refuse new runs, wait (bounded) for admitted ones, cancel the rest, close owned adapters only.

        A run cancelled here raises :class:`RuntimeClosedError` to its caller
        and commits nothing.

        Borrowed adapters and clients — everything passed to
        :func:`create_harness_runtime` — are never closed. Idempotent.
        """
        if self._state is LifecycleState.CLOSED:
            return
        self._state = LifecycleState.CLOSING
        with anyio.move_on_after(self.limits.settle_timeout_s):
            for event in list(self._active.values()):
                await event.wait()
        # Runs still active after the settle timeout are cancelled and awaited
        # before owned adapters close, so no run uses a closed adapter.
        for cancel_scope in list(self._cancel_scopes.values()):
            cancel_scope.cancel()
        for event in list(self._active.values()):
            await event.wait()
        for adapter in self._owned:
            closer = getattr(adapter, "aclose", None)
            if closer is not None:
                await closer()
        self._state = LifecycleState.CLOSED

    async def __aenter__(self) -> HarnessRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _uncertainty(omitted: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"source {s} omitted by the source budget" for s in omitted)


def _check_snapshot_shape(key: SessionKey, snap: SessionSnapshot) -> None:
    seqs = [g.seq for g in snap.resident]
    if seqs != list(range(snap.boundary, snap.next_seq)):
        raise SnapshotCorruptError(
            f"snapshot of session {key.session!r} is inconsistent: boundary {snap.boundary}, "
            f"next_seq {snap.next_seq}, resident seqs {seqs[:5]}{'…' if len(seqs) > 5 else ''}"
        )


def create_harness_runtime(
    *,
    provider: ModelProvider,
    archive: HistoryArchive,
    session_store: SessionStore,
    recall: RecallStore | None = None,
    summary: Summarizer | None = None,
    verifier: CompletionVerifier | None = None,
    memory: MemoryStore | None = None,
    limits: RuntimeLimits | None = None,
    instructions: str = DEFAULT_INSTRUCTIONS,
    tools: ToolRegistry | None = None,
    hooks: HookBroadcaster | None = None,
    owned: Sequence[object] = (),
) -> HarnessRuntime:
    """Build a runtime from adapters the application supplies (R6).

    Validates every adapter's declared capabilities (R9, R10) and refuses
    combinations they forbid, with a :class:`~agentium_harness.errors.CapabilityError`
    naming the adapter and the flag. Building provisions no storage and calls
    no model: no adapter method is called here. Everything passed in is
    borrowed and never closed by the runtime; ``owned`` lists adapters the
    caller hands over for :meth:`HarnessRuntime.aclose` to close.
    """
    check_adapter("provider", provider)
    check_adapter("archive", archive)
    check_adapter("session_store", session_store)
    if recall is not None:
        caps = check_adapter("recall", recall)
        assert isinstance(caps, RecallCapabilities)
        if summary is not None and not caps.canonical_archive_reads:
            raise CapabilityError(
                f"recall store {type(recall).__name__} lacks canonical_archive_reads, which recall "
                "together with summaries requires (R9)"
            )
    if summary is not None:
        check_adapter("summarizer", summary)
    if verifier is not None:
        check_adapter("verifier", verifier)
    if memory is not None:
        check_adapter("memory", memory)
    return HarnessRuntime(
        provider=provider,
        archive=archive,
        session_store=session_store,
        recall=recall,
        summary=summary,
        verifier=verifier,
        memory=memory,
        limits=limits or RuntimeLimits(),
        instructions=instructions,
        tools=tools or ToolRegistry(),
        hooks=hooks,
        owned=owned,
    )
