"""One error hierarchy, rooted at :class:`AgentiumError`.

Every error the library raises on purpose is a subclass of ``AgentiumError``,
so a host can catch the family in one place. Messages say what went wrong and
what to do next. Where a Python built-in category fits (a bad value, a wrong
type) the error also derives from it, so ``except ValueError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._config_issue import ConfigIssue as ConfigIssue  # re-exported: its old home

if TYPE_CHECKING:  # the engine's records import this module
    from ._engine.results import CommitState, RunResult
    from ._ports.erasure import ErasureRecord

__all__ = [
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "PublicationRefusedError",
    "RecallUnavailableError",
    "RetractionLimitError",
    "RetractionRefusedError",
    "AgentLifecycleError",
    "BlockingCallInLoopError",
    "AgentCloseError",
    "ExtractionConflictError",
    "AgentiumError",
    "ArchiveConflictError",
    "ArchiveCorruptError",
    "ArchiveError",
    "CapabilityError",
    "ConfigError",
    "ContractViolationError",
    "EncodingError",
    "ErasedSinceReadError",
    "ErasureIncompleteError",
    "ErasureInProgressError",
    "ErasureRefusedError",
    "FeatureUnavailableError",
    "IdentityError",
    "IncompleteGroupError",
    "InvalidArgumentError",
    "InvalidPayloadError",
    "InvalidIdError",
    "InvalidJSONError",
    "LegacySnapshotError",
    "MemoryDrainError",
    "OperationCancelledError",
    "OperationTimeoutError",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "ProviderError",
    "ProviderTimeoutError",
    "RecordDecodeError",
    "RegistrationError",
    "RuntimeCloseError",
    "RuntimeClosedError",
    "ScopeMismatchError",
    "SessionBusyError",
    "SessionConflictError",
    "SessionDivergedError",
    "SessionStoreError",
    "SnapshotCorruptError",
    "ToolNotGrantedError",
    "UnsupportedOperationError",
]


class AgentiumError(Exception):
    """Root of every error raised on purpose by Agentium.

    An error out of ``HarnessRuntime.run()`` or a history write says whether
    it committed: ``commit_state`` is ``not_committed``, ``committed`` or
    ``unknown`` (a save failed and reading the session back could not settle
    it); so does one an engine bug (its ``__cause__``) caused in any writing
    operation. Once a run loaded its session, ``run_result`` also reports
    what ran — every tool call in ``tool_outcomes``, the model calls in
    ``usage`` — with status ``interrupted``. Elsewhere both stay ``None``.
    """

    #: Whether the operation's write (a run's turn) stands; set on errors of writing operations.
    commit_state: CommitState | None = None
    #: What the run did before it failed (set on errors raised out of ``run()`` after loading).
    run_result: RunResult | None = None
    #: The error as the engine commits it with what ran (``retained.interruption.detail``), when its
    #: message quotes an adapter's words (a store's error text, which may name another tenant's rows):
    #: the engine's own words instead, the adapter's error by its class. ``None``: ``Type: message``.
    #: Set by the engine only: one a store set on the exception it raised is never copied or committed.
    committed_detail: str | None = None


class InvalidArgumentError(AgentiumError, TypeError, ValueError):
    """An argument to a public call has the wrong type or an unacceptable value.

    For example ``grants="shell"`` (a string where a collection of tool names
    belongs) or a ``recall_scope`` given as a dict. Nothing was admitted or written.
    """


class InvalidIdError(InvalidArgumentError):
    """An identifier (tenant, user, session, project, repository…) is not acceptable.

    The message names the field. IDs must be non-empty strings of at most 256
    characters without NUL or other control characters. It is an
    :class:`InvalidArgumentError`, the error the ports name for a bad
    argument, so ``except InvalidArgumentError`` covers a bad id too.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"invalid {field}: {reason}")


class IdentityError(AgentiumError, TypeError):
    """Something other than a :class:`~agentium_harness._scope.VerifiedIdentity` was given.

    Identity a caller merely states (a dict, a tuple, a string) is not
    authentication; verify it in the host and pass a ``VerifiedIdentity``.
    """


class CapabilityError(AgentiumError, ValueError):
    """Declared capabilities are missing, malformed or incompatible.

    Raised at load time (registration) and at construction time; capability
    checks validate declarations, they do not certify backend behaviour.
    """


class ContractViolationError(AgentiumError):
    """An adapter returned something its port contract forbids.

    Examples: a receipt whose digest does not match the group that was
    appended, more items than the bound that was passed in. The runtime does
    not trust the result and changes nothing.
    """


class PluginError(AgentiumError):
    """Base class of plugin loading and registration problems."""


class PluginLoadError(PluginError):
    """A plugin distribution could not be imported or registered.

    ``distribution`` and ``version`` name the culprit; ``error`` describes it.
    """

    def __init__(self, distribution: str, version: str, error: str) -> None:
        self.distribution = distribution
        self.version = version
        self.error = error
        super().__init__(f"plugin {distribution} {version}: {error}")


class RegistrationError(PluginError, CapabilityError):
    """One adapter registration was rejected by load-time validation."""

    def __init__(self, kind: str, name: str, distribution: str, reason: str) -> None:
        self.kind = kind
        self.name = name
        self.distribution = distribution
        self.reason = reason
        super().__init__(f"{kind} adapter {name!r} from {distribution}: {reason}")


class PluginNotFoundError(PluginError, LookupError):
    """A config or call selected an adapter name that no loaded plugin provides."""


class ConfigError(AgentiumError, ValueError):
    """A config file is invalid. ``issues`` lists every problem found, each with its path."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str | None = None) -> None:
        self.issues = tuple(issues)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  {issue}" for issue in self.issues)
        super().__init__(f"{len(self.issues)} config error(s){where}:\n{lines}")


class SessionBusyError(AgentiumError):
    """A run is already admitted for this session; one run per session at a time."""


class RuntimeClosedError(AgentiumError):
    """The runtime is closing or closed and admits no new runs."""


class SessionStoreError(AgentiumError):
    """The session store could not complete an operation.

    A store cannot always know whether a failed write landed (a lost reply, a
    timeout after the backend accepted it). Out of ``run()``, the engine has
    read the session back before raising, and ``commit_state`` says what it
    found.
    """


class SessionConflictError(SessionStoreError):
    """The session snapshot changed since it was loaded (compare-and-set failed).

    Another writer committed first. Nothing was overwritten; reload and retry.
    """


class ErasedSinceReadError(SessionConflictError):
    """An erasure covering the session began or finished since the read a write said it follows.

    Raised by ``append(after_read=...)``: what the write holds was made from
    that read (a model's answer to the history it returned), and the
    session may have been erased since, so it is refused rather than
    written into the erased id. Nothing was written (``commit_state``
    ``not_committed``) and a WARNING was logged, without content. Do not
    retry the same write: read the session again (``read_history``).
    """


class ArchiveError(AgentiumError):
    """The history archive could not complete an operation."""


class ArchiveConflictError(ArchiveError):
    """A group was appended again with the same sequence number but different content.

    Archived groups are never overwritten.
    """


class ErasureInProgressError(AgentiumError):
    """An erasure of this scope is under way (or stopped part way), so the operation was refused.

    Runs, appends and maintenance on a session the pending erasure covers are refused until it completes,
    so no run sees half-erased history; a second erasure overlapping it is refused too. ``erasure_id``
    names the pending erasure: finish it with ``runtime.resume_erasures()`` or ``agentium erase --resume``.
    Nothing was done, unless a memory write was taken back ("was forgotten"): written, then forgotten as
    ``forget`` does (every revision: a correction's fact too). ``fact_ids``: the facts it wrote whose
    take-back failed, left to forget (named in the message only with content capture: an id is content).
    """

    def __init__(self, message: str, erasure_id: str = "", fact_ids: tuple[str, ...] = ()) -> None:
        self.erasure_id, self.fact_ids = erasure_id, fact_ids
        super().__init__(message)


class ErasureIncompleteError(AgentiumError):
    """An erasure stopped part way: a store failed, or late writes of the scope were still running.

    What was erased stays erased and the durable record stays ``pending``,
    so runs on the scope are still refused; ``record`` holds the progress
    so far. Resume it (``runtime.resume_erasures()``, ``agentium erase
    --resume``) once the cause is fixed: erasing what is already gone is a
    no-op, and the record completes into the tombstone. Its ``record`` is
    complete in two cases: the subclass :class:`ErasureOvertakenError` (the
    erasure ended, but the target may still hold data), and an erasure whose
    tombstone is saved and indexed but whose removal from ``pending`` failed
    with an outcome that could not be read back (its fence may still be up:
    ``erasure_status`` shows it; a resume lifts it).
    """

    def __init__(self, message: str, record: ErasureRecord | None = None) -> None:
        self.record = record
        super().__init__(message)


class ErasureRefusedError(AgentiumError, PermissionError):
    """The operator's attestation does not cover the erasure target; nothing was erased.

    An operator acts within one tenant: a target in another tenant (or in
    the reserved tenant of the erasure records) is refused.
    """


class ScopeMismatchError(AgentiumError, PermissionError):
    """A stored snapshot's memory scope differs from the requested scope.

    This is always refused; ``attest_legacy_memory_scope`` cannot override it.
    """


class LegacySnapshotError(AgentiumError, PermissionError):
    """A legacy snapshot has no memory scope and no attestation was given.

    Verify the snapshot's exact scope in the host, then pass
    ``attest_legacy_memory_scope=True`` (or run ``agentium session migrate``).
    """


class SnapshotCorruptError(SessionStoreError):
    """A stored session snapshot cannot be decoded. Nothing was overwritten."""


class ToolNotGrantedError(AgentiumError, PermissionError):
    """A tool call named a tool that is unknown or not granted for this run."""


class ProviderError(AgentiumError):
    """The model provider failed. The session was not changed."""


class AgentLifecycleError(AgentiumError):
    """An agent is busy, closing or closed and rejects new admission."""


class MemoryDrainError(AgentiumError):
    """Owned memory work (summary, extraction, final writes) did not drain cleanly.

    ``result`` is the :class:`~agentium_harness._engine.memory.work.DrainResult`: every
    item by name, as completed, failed or cancelled.
    """

    def __init__(self, message: str, result: object = None) -> None:
        self.result = result
        super().__init__(message)


class AgentCloseError(AgentLifecycleError):
    """``Agent.close()`` could not tear everything down; ``failures`` lists every problem.

    The agent stays ``closing`` (it admits nothing) and ``close()`` may be
    called again: it retries only what failed. Borrowed resources are never closed.
    ``drain`` is the drain result of that attempt, if the drain ran.
    """

    def __init__(self, failures: Sequence[str], drain: object = None) -> None:
        self.failures = tuple(failures)
        self.drain = drain
        super().__init__(
            f"agent teardown failed ({len(self.failures)} problem(s)): " + "; ".join(self.failures)
        )


class ExtractionConflictError(AgentiumError, ValueError):
    """Agent memory extraction was configured for a session whose canonical history the harness owns.

    Extracting there twice (once by the agent, once from the harness's own
    history) would duplicate memory (R37). Turn one of them off.
    """


class OperationCancelledError(AgentiumError):
    """An operation was refused or stopped because its ``OpContext`` was cancelled or past its deadline.

    Raised by adapters that check the context before starting work (and,
    where the backend allows, between steps). Work that was refused wrote
    nothing; retry with a fresh context if the caller still wants it done.
    ``reason`` is the signal's reason or ``"deadline passed"``.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        self.reason = reason
        super().__init__(message)


class OperationTimeoutError(OperationCancelledError):
    """An adapter call (or a tool handler) did not finish within its deadline and was cancelled.

    The engine runs every adapter call under its operation deadline; past it the
    call's cancel scope fires and its ``OpContext`` signal is set. ``operation``
    names the call (``"provider complete"``, ``"archive append"`` …). Nothing the
    timed-out call would have committed is trusted. ``abandoned`` is true when
    the call had not stopped even after its cancellation (it was blocked in a
    worker thread, say): the engine returned without it and discards whatever
    it produces later.
    """

    def __init__(self, message: str, operation: str, timeout_s: float, *, abandoned: bool = False) -> None:
        self.operation = operation
        self.timeout_s = timeout_s
        self.abandoned = abandoned
        super().__init__(message, "deadline passed")


class RuntimeCloseError(AgentiumError):
    """``aclose()`` could not tear everything down. ``failures`` lists every problem.

    The runtime stays ``closing`` (it admits nothing) and ``aclose()`` may be
    called again: it retries only what failed. Borrowed adapters are never closed.
    """

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = tuple(failures)
        super().__init__(
            f"runtime teardown failed ({len(self.failures)} problem(s)): " + "; ".join(self.failures)
        )


class BlockingCallInLoopError(AgentiumError, RuntimeError):
    """A :class:`~agentium_harness.BlockingRuntime` method was called on the runtime's own loop thread.

    Blocking there would wait for the loop that is running the caller (a
    tool handler, a clarifier): a deadlock. Nothing was done; await the
    :class:`~agentium_harness.HarnessRuntime` there instead.
    """


class SessionDivergedError(AgentiumError):
    """The archive holds different groups at sequence numbers this session has not committed.

    Another writer appended to the same archive session, or the session store
    lost its snapshot while the archive kept its rows. The session is marked
    ``diverged``; new runs are refused until an operator reconciles it with
    ``runtime.reconcile_session(...)`` or ``agentium session reconcile``, which
    keeps both copies (see docs/runtime.md).
    """


class FeatureUnavailableError(CapabilityError):
    """An optional feature was configured whose engine is not part of this release.

    Building a runtime with such an adapter is refused rather than accepting it
    and never calling it.
    """


class UnsupportedOperationError(AgentiumError, NotImplementedError):
    """An adapter was asked for an operation it did not declare (see its capabilities)."""


class InvalidPayloadError(InvalidArgumentError):
    """A message's ``payload`` is not plain JSON, is nested too deeply or is too large; nothing was written.

    Plain JSON is objects with string keys, lists, strings (valid Unicode),
    finite numbers, booleans and ``None``: exactly what canonical JSON can
    store and give back unchanged. ``nan`` and ``inf`` are refused (canonical
    JSON cannot hold them), and so are tuples and non-string keys (they would
    come back as lists and strings). ``payload_format`` must name the payload.
    """


class IncompleteGroupError(InvalidArgumentError):
    """Messages given to ``append`` would not form a complete group; nothing was written.

    A group is complete when it has at least one message, every tool call in
    it has its result after it, every tool result answers an earlier call of
    the same group, once, and no other message comes between an assistant's
    tool calls and their results (Chat Completions refuses a request with
    one there, and ``run()`` sends the group as committed). A foreign tool
    result (a ``tool`` message with a ``payload``) needs no call of core's
    and may come anywhere. Append a tool call together with its result.
    """


class RetractionRefusedError(InvalidArgumentError):
    """``retract`` asked for more messages than the session's view holds; nothing was written.

    A retraction takes the last ``count`` messages of the view; it never
    reaches past the view's start (the latest ``reset_view``) or takes a
    message twice. ``available`` is how many messages the view holds.
    """

    def __init__(self, message: str, available: int) -> None:
        self.available = available
        super().__init__(message)


class RetractionLimitError(InvalidArgumentError):
    """``retract`` would give the view more retracted spans than ``limit``; nothing was written.

    A retraction not joined to the retracted messages just before it adds a
    span to the view state every save rewrites (``MAX_RETRACTION_SPANS``
    bound them). ``reset_view`` starts the view afresh, with none (nothing
    is deleted). ``spans`` is how many the view holds now.
    """

    def __init__(self, message: str, *, spans: int, limit: int) -> None:
        self.spans = spans
        self.limit = limit
        super().__init__(message)


class ProviderTimeoutError(ProviderError):
    """The model provider did not answer within its deadline; the call was cancelled.

    The session was not changed.
    """

    def __init__(self, message: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(message)


class EncodingError(AgentiumError, ValueError):
    """A value cannot be encoded as canonical JSON (a ``nan`` or ``inf`` float, a non-JSON type).

    Canonical JSON is what digests are computed over, so such a value can
    never be stored or archived; it is refused before anything is written.
    """


class RecordDecodeError(AgentiumError, ValueError):
    """Stored or supplied data does not decode strictly into the record it should be.

    ``record`` names the record class; ``issues`` lists every problem, each
    with its ``$``-path (for example ``expected a string, got null @
    $.resident[0].messages[1].content``). Decoding never coerces, so a
    ``null`` id or a number where text belongs is reported here instead of
    becoming ``"None"`` or ``"12"``. Adapters turn it into their port's
    corruption error (``SnapshotCorruptError``, ``ArchiveCorruptError``).
    """

    def __init__(self, record: str, issues: Sequence[str]) -> None:
        self.record = record
        self.issues = tuple(issues)
        super().__init__(f"cannot decode {record}: " + "; ".join(self.issues))


class InvalidJSONError(RecordDecodeError):
    """JSON text was refused before (or while) it was parsed; ``reason`` says why.

    Raised by :func:`~agentium_harness._json.decode_json` for text that is
    larger than its byte cap, nested deeper than its depth cap, not UTF-8, not
    JSON, or JSON that canonical data never holds: a duplicate object key,
    ``NaN``/``Infinity`` (or a number too large to be finite), a lone
    surrogate escape. It is a :class:`RecordDecodeError`, so an adapter that
    turns decode errors into its corruption error (``SnapshotCorruptError``,
    ``ArchiveCorruptError``) handles it too. Nothing was decoded or changed.

    ``limit`` is ``"max_bytes"`` or ``"max_depth"`` when the text was refused
    for passing that cap of :func:`~agentium_harness._json.decode_json`
    (a caller with its own option names can report it as a limit), else ``None``.
    """

    def __init__(self, reason: str, *, limit: str | None = None) -> None:
        self.reason = reason
        self.limit = limit
        super().__init__("JSON", [reason])


class ArchiveCorruptError(ArchiveError):
    """An archived group read back is damaged or misfiled; it is not returned and nothing is changed.

    Raised when a stored row does not match its digest, does not decode
    strictly, holds another ``seq`` than its key, or belongs (by its retained
    scope) to another session than the one it was read under.
    """


class PublicationRefusedError(AgentiumError):
    """The host's conditional publication refused the commit (R25); the session was not changed."""


class RecallUnavailableError(CapabilityError):
    """A recall store cannot work here (for example: the local SQLite has no FTS5); nothing was created."""


class EmbeddingError(AgentiumError):
    """An embedder failed, or returned something the engine refuses; no vector of that call was used.

    Raised (and reported as a diagnostic, or as a recall problem) when an
    embedder returns too many or too few vectors, a vector of another
    dimension than its model declares, NaN, infinity or a zero vector, or
    raises or times out. Nothing is written: a batch with one bad vector is
    dropped whole. Fix or replace the embedder; ``agentium recall rebuild``
    embeds what was missed.
    """


class EmbeddingModelMismatchError(EmbeddingError, ValueError):
    """A recall index holds vectors of one embedding model and was given a vector of another.

    Vectors of two models (or two dimensions) are never compared or mixed:
    the store refuses the vector and writes nothing. Configure the embedder
    the index was built with (the message names it), or point the recall
    store at a new index and run ``agentium recall rebuild``.
    """
