"""Building a runtime from adapters the application supplies (R6).

Construction validates every adapter's declared capabilities and every
option, provisions no storage and calls no model. The runtime itself is
:class:`~.runtime.HarnessRuntime`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import CapabilityError, InvalidArgumentError
from .._observe.settings import Telemetry
from .._observe.spans import unattributed
from .._ports.archive import HistoryArchive
from .._ports.embedder import Embedder, EmbeddingLimits
from .._ports.memory import MemoryStore
from .._ports.provider import ModelProvider
from .._ports.recall import RecallCapabilities, RecallLimits, RecallStore
from .._ports.sessions import SessionStore
from .._ports.summary import Summarizer, SummaryLimits
from .._ports.verify import CompletionVerifier
from .._validators import lone_surrogate_at
from .._verdicts import EvidenceLimits
from .arguments import check_options, check_verification
from .checks import check_adapter
from .embedding import make_hybrid
from .hooks import HookBroadcaster
from .lifecycle import check_closable
from .limits import RuntimeLimits
from .memory.manager import MemoryManager
from .recall_policy import RecallPolicy
from .recall_view import ConditionalPublication
from .retention import RetentionPolicy
from .runtime import DEFAULT_INSTRUCTIONS, HarnessRuntime
from .summary import summary_reader
from .tools import ToolRegistry
from .verification import CompletionPolicy

__all__ = ["create_harness_runtime"]


def create_harness_runtime(
    *,
    provider: ModelProvider,
    archive: HistoryArchive,
    session_store: SessionStore,
    recall: RecallStore | None = None,
    summarizer: Summarizer | None = None,
    verifier: CompletionVerifier | None = None,
    memory: MemoryStore | MemoryManager | None = None,
    limits: RuntimeLimits | None = None,
    instructions: str = DEFAULT_INSTRUCTIONS,
    tools: ToolRegistry | None = None,
    hooks: HookBroadcaster | None = None,
    owned: Sequence[object] = (),
    recall_limits: RecallLimits | None = None,
    recall_policy: RecallPolicy | None = None,
    publication: ConditionalPublication | None = None,
    summary_limits: SummaryLimits | None = None,
    completion_policy: CompletionPolicy | None = None,
    evidence_limits: EvidenceLimits | None = None,
    verify_timeout_s: float | None = None,
    telemetry: Telemetry | None = None,
    embedder: Embedder | None = None,
    embedding_limits: EmbeddingLimits | None = None,
    retention: RetentionPolicy | None = None,
) -> HarnessRuntime:
    """Build a runtime from adapters the application supplies (R6).

    Validates every adapter's declared capabilities (R9, R10) and refuses
    combinations they forbid, with a :class:`~agentium_harness._errors.CapabilityError`
    naming the adapter and the flag. Building provisions no storage and calls
    no model: no adapter method is called here. Everything passed in is
    borrowed and never closed by the runtime; ``owned`` lists adapters the
    caller hands over for :meth:`HarnessRuntime.aclose` to close (each must
    have an async ``aclose()``, else :class:`InvalidArgumentError`).

    ``recall`` is optional (R1): without it a run works exactly as before.
    With it, ``recall_limits`` (default :class:`RecallLimits`) bounds each run,
    ``recall_policy`` (default :func:`current_session_recall_policy`) decides,
    and ``publication`` optionally hooks the commit (R25).

    ``summarizer`` is optional too: with it, each commit that archives groups
    folds them into the session's task summary (docs/summaries.md), bounded
    by ``summary_limits`` (default :class:`SummaryLimits`). Summaries read
    archived groups through the recall store's ``canonical_archive_reads``,
    or the archive's ``bounded_reads`` without recall.

    ``verifier`` is optional: with it, a run that passes ``completion=`` has
    its final answer verified against current host evidence (docs/verification.md)
    under ``completion_policy`` (default :func:`verified_completion_policy`),
    ``evidence_limits`` (default 32 entries, 8192 bytes) and
    ``verify_timeout_s`` (default ``limits.op_timeout_s``).

    ``memory`` is optional: a :class:`MemoryManager` the host built (borrowed),
    or a bare memory store the runtime wraps in one (docs/memory.md). Its
    selected facts go into each request as labeled source data of kind
    ``memory`` under the manager's ``injection_tokens`` budget, and
    :meth:`HarnessRuntime.drain` and ``aclose`` drain its owned work along
    with the runtime's background summary updates.

    ``retention`` (a :class:`RetentionPolicy`, ``[retention]``) is what
    :meth:`HarnessRuntime.apply_retention` applies; it does nothing by itself
    (docs/erasure.md).

    ``telemetry`` chooses where spans and metrics go (the global OpenTelemetry
    providers by default), whether content is captured (off by default) and
    how scope ids are shown (hashed by default): docs/observability.md.
    ``embedder`` is optional: with it, recall is hybrid (docs/recall.md):
    queries and archived groups are embedded under ``embedding_limits``
    (default :class:`EmbeddingLimits`) and the recall store fuses lexical
    and vector candidates. It needs a recall store that declares
    ``vector_indexing`` and ``hybrid_discovery``; anything else is refused
    here with a :class:`~agentium_harness._errors.CapabilityError`.
    """
    if telemetry is not None and not isinstance(telemetry, Telemetry):
        raise InvalidArgumentError(f"telemetry must be a Telemetry, got {type(telemetry).__name__}")
    _check_plain_arguments(instructions, hooks, owned, embedding_limits)
    check_adapter("provider", provider)
    check_adapter("archive", archive)
    check_adapter("session_store", session_store)
    if recall is not None:
        caps = check_adapter("recall", recall)
        assert isinstance(caps, RecallCapabilities)
        if summarizer is not None and not caps.canonical_archive_reads:
            raise CapabilityError(
                f"recall store {type(recall).__name__} lacks canonical_archive_reads, which recall "
                "together with summaries requires"
            )
    optional: dict[str, object] = {"summarizer": summarizer, "verifier": verifier}
    if memory is not None and not isinstance(memory, MemoryManager):
        optional["memory"] = memory
    for kind, adapter in optional.items():
        if adapter is not None:
            check_adapter(kind, adapter)
    check_options(
        limits=limits,
        tools=tools,
        recall=recall,
        recall_limits=recall_limits,
        recall_policy=recall_policy,
        publication=publication,
        summarizer=summarizer,
        summary_limits=summary_limits,
    )
    check_verification(completion_policy, evidence_limits, verify_timeout_s)
    if retention is not None and not isinstance(retention, RetentionPolicy):
        raise InvalidArgumentError(f"retention must be a RetentionPolicy, got {type(retention).__name__}")
    hybrid = make_hybrid(embedder, embedding_limits, recall) if embedder is not None else None
    reader = summary_reader(recall, archive) if summarizer is not None else None
    # owned=[5] was kept and closed nothing (close_owned skips what has no aclose): refused instead.
    # Checked after the adapters, so a wrong adapter is named by its port, and before bind changes one.
    check_closable(owned)
    bind = getattr(summarizer, "bind_provider", None)
    if callable(bind):
        with unattributed():  # adapter code run while building: no runtime's operation, whatever block
            bind(provider)  # a summarizer that asks a model uses the runtime's unless it has its own
    return HarnessRuntime(
        provider=provider,
        archive=archive,
        session_store=session_store,
        limits=limits or RuntimeLimits(),
        instructions=instructions,
        tools=tools or ToolRegistry(),
        hooks=hooks,
        owned=owned,
        recall=recall,
        recall_limits=recall_limits,
        recall_policy=recall_policy,
        publication=publication,
        summarizer=summarizer,
        summary_limits=summary_limits,
        summary_reader=reader,
        verifier=verifier,
        completion_policy=completion_policy,
        evidence_limits=evidence_limits,
        verify_timeout_s=verify_timeout_s,
        memory=(
            memory
            if isinstance(memory, MemoryManager) or memory is None
            else MemoryManager(memory, hooks=hooks, telemetry=telemetry)
        ),
        owns_memory_manager=memory is not None and not isinstance(memory, MemoryManager),
        telemetry=telemetry,
        hybrid=hybrid,
        retention=retention,
    )


def _check_plain_arguments(
    instructions: object, hooks: object, owned: object, embedding_limits: object
) -> None:
    """The arguments no adapter check covers, refused at construction rather than on first use.

    ``instructions=5`` or ``None`` failed every run with a bare ``AttributeError``, and text
    holding a lone surrogate with a ``UnicodeEncodeError``: the request could never be encoded.
    """
    if not isinstance(instructions, str):
        raise InvalidArgumentError(f"instructions must be a string, got {type(instructions).__name__}")
    at = lone_surrogate_at(instructions)
    if at is not None:
        raise InvalidArgumentError(
            f"instructions is not valid Unicode text: it holds a lone surrogate at character {at}"
        )
    if hooks is not None and not callable(getattr(hooks, "broadcast", None)):
        raise InvalidArgumentError(
            f"hooks must have a broadcast method (such as a PluginRegistry), got {type(hooks).__name__}"
        )
    # A str is a Sequence too: owned="archive" would "own" its letters, and close none of the adapters.
    if isinstance(owned, str | bytes) or not isinstance(owned, Sequence | set | frozenset):
        raise InvalidArgumentError(f"owned must be a sequence of adapters, got {type(owned).__name__}")
    if embedding_limits is not None and not isinstance(embedding_limits, EmbeddingLimits):
        raise InvalidArgumentError(
            f"embedding_limits must be an EmbeddingLimits or None, got {type(embedding_limits).__name__}"
        )
