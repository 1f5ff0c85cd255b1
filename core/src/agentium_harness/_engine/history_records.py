"""What the history API returns: frozen records, public in ``agentium_harness``."""

from __future__ import annotations

import itertools

import attrs

from .._errors import InvalidArgumentError
from .._history import HistoryControl, Message, MessageGroup, MessageRef, detached, detached_message
from .._ports.archive import ArchiveReceipt
from .._tuples import tuple_of_history_groups
from .results import CommitState, Diagnostic, EvictionStatus

__all__ = [
    "AppendResult",
    "HistoryGroup",
    "HistoryPage",
    "ReadFence",
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


_new = object.__new__
_set = object.__setattr__


@attrs.frozen(slots=True, repr=False)
class HistoryGroup:
    """One committed group of a history page and which of its messages the view shows.

    ``group`` is the canonical group exactly as committed (checked against
    the archive's digest, or read from the digest-checked snapshot);
    ``shown`` are the indexes of its messages in the session's view. With
    ``read_history(view=True)`` only groups showing a message are returned;
    with ``view=False`` every group, control groups included. Both
    ``group`` and ``messages`` are the caller's own: payloads and tool-call
    arguments changed in place change nothing the runtime holds (the
    adapters hand the same decoded group to every read and to ``run()``).
    """

    _committed: MessageGroup = attrs.field(alias="group")
    shown: tuple[int, ...]
    # The caller's copies, made on first use (a page read only for its messages copies no group).
    _own_group: MessageGroup | None = attrs.field(default=None, init=False, eq=False, repr=False)
    _own_messages: tuple[Message, ...] | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @classmethod
    def shared(cls, group: MessageGroup, shown: tuple[int, ...]) -> HistoryGroup:
        """A page entry handing out ``group`` itself, no copy (``read_history(copy=False)``)."""
        # Built field by field: a page of a thousand groups makes a thousand of these.
        entry = _new(cls)
        _set(entry, "_committed", group)
        _set(entry, "shown", shown)
        _set(entry, "_own_group", group)  # the group itself: its messages are handed out as they are
        _set(entry, "_own_messages", None)
        return entry

    @property
    def group(self) -> MessageGroup:
        """The committed group (a copy of its messages' payloads and arguments: see the class)."""
        own = self._own_group
        if own is None:
            own = detached(self._committed, self._own_messages if self._all_shown() else None)
            _set(self, "_own_group", own)
        return own

    @property
    def seq(self) -> int:
        """The group's sequence number."""
        return self._committed.seq

    @property
    def digest(self) -> str:
        """The digest of the group's canonical bytes."""
        return self._committed.digest

    @property
    def size_bytes(self) -> int:
        """The committed group's canonical bytes: what ``read_history(max_bytes=...)`` counts (no copy)."""
        return self._committed.size_bytes

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages the view shows, in order (all of them: ``group.messages``)."""
        own = self._own_messages
        if own is not None:
            return own
        committed = self._committed
        if self._own_group is committed:
            # Shared, or nothing in the group a caller could change in place: no copy to make.
            all_messages = committed.messages
            return all_messages if self._all_shown() else tuple(all_messages[i] for i in self.shown)
        if self._own_group is not None and self._all_shown():
            own = self._own_group.messages
        else:
            all_messages = committed.messages
            shown = all_messages if self._all_shown() else (all_messages[i] for i in self.shown)
            own = tuple(map(detached_message, shown))
        _set(self, "_own_messages", own)
        return own

    @property
    def control(self) -> HistoryControl | None:
        """The control record of a control group (``view=False`` pages only), else ``None``."""
        return self._committed.control

    def __repr__(self) -> str:
        return f"HistoryGroup(group={self._committed!r}, shown={self.shown!r})"

    def _all_shown(self) -> bool:
        # Every message shown (the indexes are distinct and in range).
        return len(self.shown) == len(self._committed.messages)


@attrs.frozen(slots=True, repr=False)
class ReadFence:
    """Where the tenant's erasures stood when ``read_history`` read a session: opaque, for ``after_read``.

    ``HistoryPage.read_fence`` carries one. Pass it, or the page, to
    ``append(after_read=...)`` when what is appended was made from that
    read (the model's answer to the history read): the append is refused
    with :class:`~agentium_harness.ErasedSinceReadError` if an erasure
    covering the session began or finished since (docs/runtime.md,
    "Erasure and writes"). It names the session it was read from; it holds
    no message content and is only meaningful to runtimes sharing the
    session store the read went to.
    """

    _tenant: str
    _user: str
    _session: str
    #: The fence point: the revision of the tenant's pending-erasures record (``None``: none yet).
    _point: tuple[int | None]

    @property
    def session_ids(self) -> tuple[str, str, str]:
        """The tenant, user and session ids of the session read."""
        return (self._tenant, self._user, self._session)

    @property
    def point(self) -> tuple[int | None]:
        """The fence point itself, as the engine's commit fence compares it."""
        return self._point

    def __repr__(self) -> str:
        return f"ReadFence(session={self._session!r})"


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
      ``boundary``: the seq of its first resident group;
    - ``read_fence``: where the tenant's erasures stood at the read
      (:class:`ReadFence`); pass the page or it as ``append(after_read=...)``
      (``None`` only on a page not made by ``read_history``).
    """

    groups: tuple[HistoryGroup, ...] = attrs.field(converter=tuple_of_history_groups)
    next_before_seq: int | None
    view_start: int
    view_retracted: int
    next_seq: int
    snapshot_revision: int
    boundary: int
    # Not compared: two reads of the same history are the same page whatever erasures ran elsewhere.
    read_fence: ReadFence | None = attrs.field(default=None, eq=False)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The view's messages among the page's groups, oldest first.

        With ``view=False`` the page holds every group, but this still gives
        only what the view shows; read ``g.group.messages`` of each group for all of them.
        """
        return tuple(itertools.chain.from_iterable(g.messages for g in self.groups))

    def joins(self, first: HistoryPage, seam: HistoryGroup) -> bool:
        """Whether this page, read with ``before_seq=seam.group.seq + 1``, continues the read ``first`` began.

        A host reading a session over several pages (newest first) asks for each
        older page from the *seam* on, the oldest group the page before gave it,
        and checks that the new page ends with that group unchanged, as seen in
        the same view. Appends between the pages leave older groups as they
        were; a retraction or a ``reset_view`` changes the view; an erasure of
        the session, with its id used again, changes the groups at the same seqs
        (or puts the seam past the new session's end, which ``read_history``
        refuses). ``False`` in any of those cases: start the read again rather
        than mix erased messages, or a retraction's before and after, with the
        session as it is now. ``first`` must be a :class:`HistoryPage` and
        ``seam`` a :class:`HistoryGroup` (exactly: a subclass's own code would
        decide the answer), else :class:`InvalidArgumentError`.
        """
        if type(first) is not HistoryPage or type(seam) is not HistoryGroup:
            raise InvalidArgumentError(
                "joins takes the first page read_history returned and a HistoryGroup of it (its seam), "
                f"got a {type(first).__name__} and a {type(seam).__name__}"
            )
        return (
            (self.view_start, self.view_retracted) == (first.view_start, first.view_retracted)
            and self.next_seq >= first.next_seq
            and self.snapshot_revision >= first.snapshot_revision
            and bool(self.groups)
            and self.groups[-1].shown == seam.shown
            and self.groups[-1].group == seam.group
        )


@attrs.frozen(slots=True)
class SessionPage:
    """One page of a user's session ids, sorted by code point.

    ``next_after`` is what to pass as ``after`` for the next page, or
    ``None`` when this page was the last.
    """

    sessions: tuple[str, ...]
    next_after: str | None
