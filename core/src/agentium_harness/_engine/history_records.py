"""What the history API returns: frozen records, public in ``agentium_harness``."""

from __future__ import annotations

import itertools

import attrs

from .._history import HistoryControl, Message, MessageGroup, MessageRef
from .._ports.archive import ArchiveReceipt
from .._tuples import tuple_of_history_groups
from .results import CommitState, Diagnostic, EvictionStatus

__all__ = [
    "AppendResult",
    "HistoryGroup",
    "HistoryPage",
    "ResetResult",
    "RetractResult",
    "SessionPage",
]


@attrs.frozen(slots=True)
class AppendResult:
    """What ``HarnessRuntime.append`` committed: one group, with no model call.

    - ``seq``: the new group's sequence number;
    - ``snapshot_revision``: the session's revision after the commit (and
      after the summary update, when it ran inline);
    - ``boundary``: the seq of the first group still resident (every group
      below it is archived); ``resident_groups``: how many are resident;
    - ``eviction``: what happened to the groups over the resident bound
      (``archived``, ``deferred`` when the archive failed, ``not_needed``);
      ``archived`` holds the archive's receipts for them;
    - ``commit_state``: ``committed`` (an append that returns always is;
      errors carry ``not_committed`` or ``unknown``);
    - ``diagnostics``: degraded outcomes (eviction deferred, recall indexing
      failed, an earlier summary update's report…).
    """

    seq: int
    snapshot_revision: int
    boundary: int
    resident_groups: int
    eviction: EvictionStatus
    commit_state: CommitState
    archived: tuple[ArchiveReceipt, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()

    def has(self, code: str) -> bool:
        """True if a diagnostic with ``code`` was recorded."""
        return any(d.code == code for d in self.diagnostics)


@attrs.frozen(slots=True)
class RetractResult:
    """What ``HarnessRuntime.retract`` committed: a control group taking messages out of the view.

    ``retracted`` are the positions of the messages taken out, oldest first,
    and ``messages`` the messages themselves (as committed, payload
    included): nothing was deleted, they stay in canonical history.
    ``view_start`` and ``view_retracted`` describe the view afterwards. The
    other fields are those of :class:`AppendResult` for the control group.
    """

    seq: int
    retracted: tuple[MessageRef, ...]
    messages: tuple[Message, ...]
    view_start: int
    view_retracted: int
    snapshot_revision: int
    boundary: int
    eviction: EvictionStatus
    commit_state: CommitState
    archived: tuple[ArchiveReceipt, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()

    def has(self, code: str) -> bool:
        """True if a diagnostic with ``code`` was recorded."""
        return any(d.code == code for d in self.diagnostics)


@attrs.frozen(slots=True)
class ResetResult:
    """What ``HarnessRuntime.reset_view`` committed: a control group after which the view starts empty.

    ``view_start`` is the seq the view now starts at (the control group's
    ``seq + 1``). Every group before it stays committed, byte for byte. The
    other fields are those of :class:`AppendResult` for the control group.
    """

    seq: int
    view_start: int
    snapshot_revision: int
    boundary: int
    eviction: EvictionStatus
    commit_state: CommitState
    archived: tuple[ArchiveReceipt, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()

    def has(self, code: str) -> bool:
        """True if a diagnostic with ``code`` was recorded."""
        return any(d.code == code for d in self.diagnostics)


@attrs.frozen(slots=True)
class HistoryGroup:
    """One committed group of a history page and which of its messages the view shows.

    ``group`` is the canonical group exactly as committed (checked against
    the archive's digest, or read from the digest-checked snapshot);
    ``shown`` are the indexes of its messages in the session's view. With
    ``read_history(view=True)`` only groups showing a message are returned;
    with ``view=False`` every group is, control groups included.
    """

    group: MessageGroup
    shown: tuple[int, ...]

    @property
    def seq(self) -> int:
        """The group's sequence number."""
        return self.group.seq

    @property
    def digest(self) -> str:
        """The digest of the group's canonical bytes."""
        return self.group.digest

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages the view shows, in order (all of them: ``group.messages``)."""
        all_messages = self.group.messages
        if len(self.shown) == len(all_messages):
            return all_messages  # every message shown (the indexes are distinct, in range): no copy
        return tuple(all_messages[i] for i in self.shown)

    @property
    def control(self) -> HistoryControl | None:
        """The control record of a control group (``view=False`` pages only), else ``None``."""
        return self.group.control


@attrs.frozen(slots=True)
class HistoryPage:
    """One page of a session's history, read backwards from ``before_seq``.

    - ``groups``: ascending by seq; the newest groups below ``before_seq`` that fit
      ``max_groups`` and ``max_bytes``;
    - ``next_before_seq``: pass it as ``before_seq`` for the page before this
      one; ``None`` when nothing older is left (in the view, for ``view=True``);
    - ``view_start``: the seq the session's view starts at (after its latest
      ``reset_view``; 0 when there was none); ``view_retracted``: how many
      messages retractions took out of the current view;
    - ``next_seq``: the seq the session's next group will get;
      ``snapshot_revision``: the revision the page was read at (0: no session);
      ``boundary``: the seq of its first resident group.
    """

    groups: tuple[HistoryGroup, ...] = attrs.field(converter=tuple_of_history_groups)
    next_before_seq: int | None
    view_start: int
    view_retracted: int
    next_seq: int
    snapshot_revision: int
    boundary: int

    @property
    def messages(self) -> tuple[Message, ...]:
        """The view's messages among the page's groups, oldest first.

        With ``view=False`` the page holds every group, but this still gives
        only what the view shows; read ``g.group.messages`` of each group for all of them.
        """
        return tuple(itertools.chain.from_iterable(g.messages for g in self.groups))


@attrs.frozen(slots=True)
class SessionPage:
    """One page of a user's session ids, sorted by code point.

    ``next_after`` is what to pass as ``after`` for the next page, or
    ``None`` when this page was the last.
    """

    sessions: tuple[str, ...]
    next_after: str | None
