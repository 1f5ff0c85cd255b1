"""The runtime's working parts that its stage modules share.

:class:`~.runtime.HarnessRuntime` is the orchestrator; the stage modules it
delegates to (closing, commit, erasure, history, retention, forgetting) need
more of it than a host does: the admission of operations, the background
summary work, the hooks, the adapters it owns. They reach them through
``runtime.parts`` (one :class:`RuntimeParts`), never through the runtime's
private attributes, so what the stages may touch is written down here.
Hosts have no use for it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Final

import attrs

from .._errors import RuntimeCloseError
from .._observe.settings import Resolved
from .._scope import SessionKey
from .hooks import HookBroadcaster
from .lifecycle import Admission
from .loops import ThreadSafeEvent
from .memory.claims import HarnessClaims
from .memory.manager import MemoryManager
from .memory.work import WorkTracker
from .owned_work import OwnedWork

if TYPE_CHECKING:
    from .summary import GroupReader

__all__ = ["CloseAttempt", "RuntimeParts", "SummaryRevisions"]

#: Summary-only revisions a runtime remembers (the newest, across sessions).
_SUMMARY_REVISIONS: Final = 4096


class SummaryRevisions:
    """The revisions this runtime's summary updates made: each only added a summary to the one before.

    A host that appends or retracts with ``expected_revision`` saw the
    revision its last write returned (or a page was read at); a summary
    update landing after it moves the session on without changing its
    history. A revision reached from the expected one by such updates alone
    is accepted (the write's own compare-and-set is on the current one).
    Each update is remembered with the digests of the snapshot it was saved
    on and of the one it saved: a store that breaks the port's rule that
    revisions never repeat for a key across an erasure (the built-in ones
    keep it) starts a session erased and used again (by this runtime or
    another process) at 1 again, so a number alone could name another
    incarnation's update and let a stale ``expected_revision`` past a real
    change. Bounded, forgotten
    oldest first; shared by the runtime's loops.
    """

    __slots__ = ("_lock", "_made")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (session, revision made) -> (revision it was made on, that snapshot's digest, the made one's digest)
        self._made: OrderedDict[tuple[SessionKey, int], tuple[int, str | None, str | None]] = OrderedDict()

    def record(
        self, key: SessionKey, base: int, made: int, *, base_digest: str | None, made_digest: str | None
    ) -> None:
        """A summary update saved revision ``made`` (``made_digest``) on ``base`` (``base_digest``)."""
        with self._lock:
            self._made[(key, made)] = (base, base_digest, made_digest)
            while len(self._made) > _SUMMARY_REVISIONS:
                self._made.popitem(last=False)

    def only_summaries_since(self, key: SessionKey, expected: int, current: int, digest: str | None) -> bool:
        """Whether ``current`` (its snapshot's ``digest``) is ``expected`` plus only this runtime's summaries.

        Every step back must be the very snapshot an update saved: the
        current one by its digest, each one before it by the digest the next
        update was saved on.
        """
        with self._lock:
            seen = 0
            while current != expected and seen < _SUMMARY_REVISIONS:
                entry = self._made.get((key, current))
                if entry is None or digest is None or entry[2] != digest:
                    return False
                current, digest, seen = entry[0], entry[1], seen + 1
            return current == expected


class CloseAttempt:
    """One ``aclose()`` in progress; concurrent calls, from any loop, wait for it and share its outcome."""

    __slots__ = ("done", "error", "finished")

    def __init__(self) -> None:
        self.done = ThreadSafeEvent()
        self.finished = False
        self.error: RuntimeCloseError | None = None


@attrs.define(slots=True, eq=False)
class RuntimeParts:
    """What a runtime's stage modules use besides its public attributes."""

    #: Admission of every operation, the lifecycle state, the calls abandoned past their deadline.
    admission: Admission
    #: The background summary updates, one per session at most.
    work: OwnedWork
    #: Drains all owned work: the memory manager (the summary updates tracked in it) or a tracker of its own.
    drainer: MemoryManager | WorkTracker
    #: The host's lifecycle hooks, or ``None``.
    hooks: HookBroadcaster | None
    #: Adapters the runtime built and closes on ``aclose``; those that failed to close stay for a retry.
    owned: list[object]
    #: Whether ``aclose`` closes the memory manager too (it built it from config).
    owns_memory_manager: bool
    #: Reads archived groups for the summary update, or ``None`` without a summarizer.
    summary_reader: GroupReader | None
    #: The resolved telemetry settings (docs/observability.md), resolved once.
    telemetry: Resolved
    #: The ``aclose()`` in progress, if any.
    close_attempt: CloseAttempt | None = None
    #: Whether ``start()`` ran (it warms the adapters once: the embedder's model).
    started: bool = False
    #: The revisions this runtime's summary updates made (``expected_revision`` looks past them).
    summary_revisions: SummaryRevisions = attrs.field(factory=SummaryRevisions)
    #: The sessions this runtime claimed for the harness on its memory manager (released on close).
    claims: HarnessClaims = attrs.field(factory=HarnessClaims)
