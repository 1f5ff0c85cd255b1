"""``AgentiumSession``: an OpenAI Agents SDK session over Agentium's history API."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from agentium_harness import (
    MAX_APPEND_MESSAGES,
    MAX_PAGE_GROUPS,
    AgentiumError,
    CommitState,
    ErasedSinceReadError,
    HarnessRuntime,
    HistoryGroup,
    HistoryPage,
    IdentityError,
    InvalidArgumentError,
    Message,
    ReadFence,
    RecallScope,
    ResetResult,
    RetractResult,
    SessionBusyError,
    SessionConflictError,
    VerifiedIdentity,
)
from agentium_harness.plugin_api import SessionKey

from ._errors import HistoryChangedError, SessionClosedError
from ._item_message import check_item_shape, item_to_message
from ._items import (
    items_count,
    pop_item_of,
    pop_span,
    popped_item,
    sdk_items,
    view_items,
)
from ._observe import reported
from ._session_steps import Restarts, check_limit, listed, not_committed

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["AgentiumSession"]

T = TypeVar("T")


class AgentiumSession:
    """An OpenAI Agents SDK ``Session`` whose history is Agentium canonical history.

    Pass it as ``session=`` to ``Runner.run``, ``Runner.run_sync`` or
    ``Runner.run_streamed``. It implements the SDK's ``Session`` protocol
    over :class:`~agentium_harness.HarnessRuntime`'s history API:

    - ``add_items(items)`` is one ``append``: one call, one group (a
      function call and its output, when the SDK passes them together), each
      item kept whole as the message's payload (``openai.responses.input_item/v1``)
      with readable text as its content;
    - ``get_items(limit)`` reads the view backwards in bounded pages, only as
      many groups as ``limit`` items need; damaged history fails the read
      (``SnapshotCorruptError``, ``ArchiveCorruptError``, :class:`ForeignItemError`
      for another framework's item or a stored one of no input item's shape),
      never skips an item;
    - ``pop_item()`` is a ``retract`` of the view's last message and returns
      it; ``clear_session()`` is a ``reset_view``. Neither deletes anything:
      the items stay in canonical history (``read_history(view=False)``).

    Messages Agentium's own ``run()`` committed in the session (no payload)
    read back as the items the SDK would have stored: a tool call as a
    ``function_call`` item, a tool result as a ``function_call_output``
    item (never as the user's words), so one such message may be several
    items; see :meth:`get_items` and :meth:`pop_item`.

    Each ``add_items`` follows the first ``get_items`` of this object (or
    the first after a refusal): it is appended with that read's fence
    (``append(after_read=...)``), so if the session, its user or its
    tenant was erased since (while the model ran), the items are refused
    with ``ErasedSinceReadError`` and nothing is written, rather than
    written into the erased id. A later ``get_items`` does not replace
    that read: the SDK reads the tail again by itself before some writes
    (a run resumed after a tool approval reads ``get_items(2)``, then
    writes the tool's output), and such a read, made after an erasure, is
    not what the items were made from.

    The identity is bound here, by the host that verified it, and never
    taken from the SDK: ``session_id`` only names a session of that
    identity. The runtime is borrowed (the host opens and closes it); one
    runtime serves any number of sessions. Writes that find the session busy
    (another operation of this runtime holds it) or lose a compare-and-set
    race to another process are retried, with back-off, for up to
    ``busy_timeout_s``; they committed nothing when refused.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        runtime: HarnessRuntime,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        recall_scope: RecallScope | None = None,
        busy_timeout_s: float = 30.0,
    ) -> None:
        """Bind the session to ``runtime``, the host-verified ``identity`` and ``session_id``.

        ``session_settings`` (``limit``: the default ``get_items`` limit) is
        coerced like the SDK's own sessions do. ``recall_scope`` narrows the
        session's recall as ``HarnessRuntime.append`` does. Bad arguments
        raise at once (``IdentityError`` for the identity or a
        ``recall_scope`` that is no ``RecallScope``, ``InvalidIdError``,
        ``InvalidArgumentError``: a ``TypeError`` and a ``ValueError``); a
        ``session_settings`` dict's ``limit`` must be an int or ``None``, as
        ``get_items``'s is (the SDK would coerce ``True`` or ``"3"``).
        """
        if not isinstance(runtime, HarnessRuntime):
            raise InvalidArgumentError(f"runtime must be a HarnessRuntime, got {type(runtime).__name__}")
        if isinstance(session_id, str):
            # A str subclass runs its own code wherever the id is checked or keyed (its len, its
            # iteration, its encode): the exact str of its characters runs none (str.__str__).
            session_id = str.__str__(session_id)
        # Checks the identity's type and the id's syntax now, not on the first call.
        SessionKey.of(identity, session_id)
        if (
            isinstance(busy_timeout_s, bool)
            or not isinstance(busy_timeout_s, int | float)
            or not 0 <= busy_timeout_s <= 3600
        ):
            raise InvalidArgumentError(f"busy_timeout_s must be 0 to 3600 seconds, got {busy_timeout_s!r}")
        if recall_scope is not None and not isinstance(recall_scope, RecallScope):
            # The error HarnessRuntime.append raises for it: at once, not at the first add_items.
            raise IdentityError(
                f"recall_scope must be a RecallScope or None, got {type(recall_scope).__name__}; "
                "build it with RecallScope(project=..., repository=...)"
            )
        if type(session_settings) is not dict and isinstance(session_settings, dict):
            # The SDK's coercion reads a subclass with ``**`` (its own keys() and __getitem__ once its
            # __iter__ is its own), which need not be what its get or dict.get say: one copy of what
            # it holds is both checked and coerced, so the check reads what the coercion reads.
            session_settings = dict(dict.items(session_settings))
        if isinstance(session_settings, dict):
            # The SDK's coercion would make True a limit of 1 and "3" or 2.0 one of 3 or 2.
            check_limit(session_settings.get("limit"), "session_settings.limit")
        settings = SessionSettings()
        if session_settings is not None:
            try:
                settings = coerce_session_settings(session_settings)
            except (TypeError, ValueError) as exc:  # the SDK's TypeError, pydantic's ValidationError
                # The SDK's text may quote the value given: escaped, a lone surrogate stays loggable.
                said = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
                raise InvalidArgumentError(
                    f"session_settings is not valid SDK session settings: {type(exc).__name__}: {said}"
                ) from exc
        check_limit(settings.limit, "session_settings.limit")
        self.runtime = runtime
        self.identity = identity
        self.session_id = session_id
        self.recall_scope = recall_scope
        self.busy_timeout_s = float(busy_timeout_s)
        self.session_settings = settings
        self._closed = False
        # The fence of the first get_items (the model's input): every add_items follows that read,
        # so an erasure since it refuses the write (docs/runtime.md). Not the newest get_items: the
        # SDK reads the tail again before some writes, after the model ran on the older read. Kept
        # across runs, it also refuses the first write after an erasure of the session (its user's,
        # its tenant's) that came between two runs: once, as any refusal forgets it.
        self._read_fence: ReadFence | None = None

    # -- the SDK's Session protocol ---------------------------------------------------------------

    @reported("get_items")
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items of the view (all of it when ``None``), oldest first.

        ``limit`` falls back to ``session_settings.limit``; 0 gives ``[]`` and
        a negative limit means no limit, as for the SDK's ``SQLiteSession``. A
        limit that is not an int (a bool, a float, a str) is refused with
        ``InvalidArgumentError``.
        Reads only the newest groups it needs (a group holds at least one item).

        ``limit`` counts items, and a message of Agentium's own ``run()`` may
        be several (its text and each tool call it made). A limited read
        never holds half of such a tool exchange: where the newest ``limit``
        items would begin between a ``function_call`` and its
        ``function_call_output`` (an output without its call is refused by
        the API), it begins after that exchange instead, so it may return
        fewer than ``limit`` items, never more. Items this SDK stored are
        counted as the SDK's ``SQLiteSession`` counts them (the last
        ``limit``): the SDK pairs its own items when it runs.
        """
        self._check_open()
        limit = check_limit(limit, "limit")
        wanted = check_limit(resolve_session_limit(limit, self.session_settings), "session_settings.limit")
        if wanted is not None and wanted < 0:
            wanted = None
        if wanted == 0:
            return []
        restarts = Restarts(self.busy_timeout_s)
        async for _ in restarts:
            read = await self._read_view_at(wanted)
            if read is not None:
                messages, sizes, first = read
                items = self._items_of(messages, sizes, wanted)
                if self._read_fence is None:  # only once the items are all made
                    self._read_fence = first.read_fence
                return items
        raise HistoryChangedError(
            f"the view of session {self.session_id!r} changed between the pages of every read "
            f"({restarts.made} attempts); nothing was changed: call get_items again"
        )

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Commit ``items`` as one group (nothing for ``[]``); refused input writes nothing.

        ``items`` is a list (a sequence) of items; anything else (``None``, one
        item, a str), a sequence whose own iteration raises and one of more
        than ``MAX_APPEND_MESSAGES`` items are refused with ``InvalidArgumentError``;
        an item that is no mapping, or has the shape of no input item
        (``check_item_shape``), with :class:`ForeignItemError`.

        After a ``get_items`` on this object, the append follows its first
        one (see the class): if an erasure of the session (its own, its
        user's or its tenant's) began or finished since, it raises
        ``ErasedSinceReadError`` (``commit_state`` ``not_committed``;
        nothing written, not retried) and forgets the read: call
        ``get_items`` again. With no ``get_items`` before it, nothing is
        checked against a read.
        """
        self._check_open()
        if type(items) is list:
            # What the SDK passes: a plain list runs none of the host's code when read, so it is
            # taken whole (a slice, at C speed) with the bound listed() applies item by item.
            if len(items) > MAX_APPEND_MESSAGES:
                raise InvalidArgumentError(
                    f"add_items takes at most {MAX_APPEND_MESSAGES} items in one call; nothing was written"
                )
            given = items[:]
        # A str or a mapping would be iterated as characters or keys, and None is no list of items.
        elif isinstance(items, str | bytes | bytearray | Mapping) or not isinstance(items, Sequence):
            raise InvalidArgumentError(
                f"add_items takes a list of items, got {type(items).__name__}; nothing was written"
            )
        else:
            given = listed(items)
        if not given:
            return
        messages = [item_to_message(item) for item in given]
        for position, message in enumerate(messages):  # the item as append is given it (a checked copy)
            check_item_shape(message.payload, position)
        fence = self._read_fence
        try:
            await self._retrying(
                lambda: self.runtime.append(
                    self.identity,
                    self.session_id,
                    messages,
                    recall_scope=self.recall_scope,
                    after_read=fence,
                )
            )
        except ErasedSinceReadError as exc:
            if self._read_fence is fence:
                # Stale for good: the same fence would refuse every later add_items as well.
                self._read_fence = None
            refused = ErasedSinceReadError(
                f"session {self.session_id!r} may have been erased since get_items read it (an "
                "erasure of it, its user or its tenant began or finished meanwhile); the items were "
                "made from that read, so nothing was written: call get_items again"
            )
            refused.commit_state = CommitState.NOT_COMMITTED
            raise refused from exc

    @reported("pop_item")
    async def pop_item(self) -> TResponseInputItem | None:
        """Retract the view's last item and return it; ``None`` when the view is empty.

        The item stays in canonical history; it leaves the view, so it is not
        read again, sent to a model by ``run()``, recalled or summarized. The
        last message is read and turned into an item first, and retracted
        only if the session is still at the revision it was read at: a
        message that is not an item of this SDK (:class:`ForeignItemError`)
        is refused with nothing changed, and so is a pop that would add a
        retracted span to a view holding ``MAX_RETRACTION_SPANS`` of them
        (core's ``RetractionLimitError``: ``clear_session`` starts the view
        afresh). Core retracts whole messages: a message of Agentium's own
        ``run()`` that stands for several items (an assistant's text and its
        tool calls) and a tool result of its (retracted alone, it would leave
        its call without output) are refused with :class:`PopRefusedError`,
        nothing changed: ``clear_session``, or the runtime's ``retract`` of
        whole messages, takes them out. No item ever leaves the view without
        being returned, and the item returned is the last ``get_items`` gives:
        function calls of ``run()`` whose output a host's ``retract`` took,
        which no read gives, are retracted with it when they follow it (and
        ``None`` is returned, nothing retracted, when only they are left).
        The item returned is always the one retracted: if an operator
        erased the session and its id was used again between the read and the
        retraction, that is the new session's last item, never the erased one.
        An error raised before the retraction (the read's, a refusal, a
        :class:`HistoryChangedError`) has ``commit_state`` ``not_committed``.
        """
        self._check_open()
        restarts = Restarts(self.busy_timeout_s)
        async for _ in restarts:
            try:
                read = await self._read_view_at(1)
                if read is None:
                    continue
                messages, revision = read[0], read[2].snapshot_revision
                count = pop_span(messages)  # the last item's message, and the calls no read shows after it
                if not count:
                    return None
                tail = messages[-count:]
                where = f"the last item's message in the view of session {self.session_id!r}"
                item = pop_item_of(tail[0], where)
            except AgentiumError as exc:
                not_committed(exc)  # before the retraction: nothing was
                raise

            async def take(revision: int = revision, count: int = count) -> RetractResult | None:
                try:
                    return await self.runtime.retract(
                        self.identity,
                        self.session_id,
                        count=count,
                        reason="pop_item",
                        recall_scope=self.recall_scope,
                        expected_revision=revision,
                    )
                except SessionConflictError as exc:
                    if exc.commit_state is not CommitState.NOT_COMMITTED:
                        raise
                    return None  # the session moved on since the read: read its last item again

            taken = await self._retrying(take)
            if taken is not None:
                # Another message than the one read only if the session was erased and its id used
                # again in between, on a store that hands out a revision twice (see popped_item).
                where = f"the messages pop_item retracted from session {self.session_id!r}"
                return cast("TResponseInputItem", popped_item(taken.messages, tail, item, where))
        raise not_committed(
            HistoryChangedError(
                f"the view of session {self.session_id!r} changed between every read of its last item and "
                f"its retraction ({restarts.made} attempts); nothing was changed: call pop_item again"
            )
        )

    @reported("clear_session")
    async def clear_session(self) -> None:
        """Start the view afresh (``reset_view``); nothing committed is deleted.

        A view that is already empty (or a session that does not exist) is left
        as it is: no control group is written. Otherwise the view is reset
        only if the session is still at the revision it was read at, so an
        erasure by an operator landing between the read and the reset never
        brings the erased session back (as a new one holding only the reset's
        record); the view is read again and, if it is empty now, the clear is
        done. A view that changed at every read (at least 3, and until
        ``busy_timeout_s`` is spent) raises :class:`HistoryChangedError`,
        with nothing changed. That error, and one of the read before the
        reset, has ``commit_state`` ``not_committed``.
        """
        self._check_open()
        restarts = Restarts(self.busy_timeout_s)
        async for _ in restarts:
            try:
                page = await self.runtime.read_history(
                    self.identity, self.session_id, max_groups=1, copy=False
                )
            except AgentiumError as exc:
                not_committed(exc)  # before the reset: nothing was
                raise
            if not page.groups:
                return

            async def reset(revision: int = page.snapshot_revision) -> ResetResult | None:
                try:
                    return await self.runtime.reset_view(
                        self.identity,
                        self.session_id,
                        reason="clear_session",
                        recall_scope=self.recall_scope,
                        expected_revision=revision,
                    )
                except SessionConflictError as exc:
                    if exc.commit_state is not CommitState.NOT_COMMITTED:
                        raise
                    return None  # the session moved on (or was erased) since the read: read it again

            if await self._retrying(reset) is not None:
                return
        raise not_committed(
            HistoryChangedError(
                f"the session {self.session_id!r} changed between every read of its view and its reset "
                f"({restarts.made} attempts); nothing was changed: call clear_session again"
            )
        )

    # -- closing ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` or :meth:`aclose` was called."""
        return self._closed

    def close(self) -> None:
        """Refuse further calls on this session object; the runtime (borrowed) stays open."""
        self._closed = True

    async def aclose(self) -> None:
        """Like :meth:`close`, for hosts that close sessions with ``await``."""
        self.close()

    # -- helpers ------------------------------------------------------------------------------------

    def _items_of(
        self, messages: list[Message], sizes: list[int], wanted: int | None
    ) -> list[TResponseInputItem]:
        """The SDK items of the view's ``messages`` (new dicts: see :func:`message_to_items`).

        ``sizes``: how many of ``messages`` each group read shows, oldest first. With ``wanted``,
        the newest ``wanted`` at most, never starting inside a native tool exchange
        (:func:`view_items`): a ``function_call_output`` is never read without its call.
        """
        items = sdk_items(messages, wanted)
        if items is None:
            # A native message (or damage) among those read: pair exchanges within each group.
            groups = [at for at, size in enumerate(sizes) for _ in range(size)]

            def where(at: int) -> str:  # where a message is, for an error only
                return f"message {at} of the view of session {self.session_id!r}"

            items = view_items(messages, groups, where, wanted)
        return cast("list[TResponseInputItem]", items)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"{type(self).__name__} is closed; create a new session object")

    async def _read_view_at(self, wanted: int | None) -> tuple[list[Message], list[int], HistoryPage] | None:
        """The view's newest whole groups holding ``wanted`` items (all when ``None``), and the first page.

        Returns the groups' messages, how many each group shows (oldest first), and the first page.
        Whole groups: a native tool exchange lies within one group, so its call is read with
        its result. ``None`` when the view changed mid-read. The first page holds the revision
        and the erasure fence of the read (the pages after it are checked to join it).
        """
        # Oldest first: the messages read, how many each group shows and (only with ``wanted``)
        # how many items each is. Plain ints, no object per group kept: a full read of 10,000
        # items takes 5,000 groups, and the more objects outlive a page, the more often the
        # cyclic GC runs a full collection while the read copies its items.
        messages: list[Message] = []
        sizes: list[int] = []
        counts: list[int] = []
        counted = 0  # the items of the groups read
        first: HistoryPage | None = None
        seam: HistoryGroup | None = None  # the oldest group read so far; the next page ends with it
        while True:
            if wanted is None:
                groups = MAX_PAGE_GROUPS
            elif first is None:
                # The SDK stores at least two items per turn (the input and the answer): half as
                # many groups as items is the first guess, so a page reads no group it does not need.
                groups = min(MAX_PAGE_GROUPS, (wanted + 1) // 2)
            else:
                # Every group shown holds at least one item: this many groups are always enough
                # (and one more: the seam, read again).
                groups = min(MAX_PAGE_GROUPS, wanted - counted + 1)
            if first is None:
                # No copy: every item handed out is a copy made here (message_to_items).
                page = first = await self.runtime.read_history(
                    self.identity, self.session_id, max_groups=groups, copy=False
                )
            else:
                assert seam is not None  # set from every page that has one after it
                later = await self._next_page(seam, groups, first)
                if later is None:
                    return None
                page = later
            # A later page ends with the seam, whose messages are read already.
            fresh = page.groups if seam is None else page.groups[:-1]
            shown = [g.messages for g in fresh]
            messages[:0] = chain.from_iterable(shown)
            sizes[:0] = map(len, shown)
            if wanted is not None:  # a full read counts no item (a call per message, for nothing)
                older = list(map(items_count, shown))
                counts[:0] = older
                counted += sum(older)
            if (wanted is not None and counted >= wanted) or page.next_before_seq is None:
                break
            seam = page.groups[0]
        assert first is not None
        if wanted is not None:
            # The oldest groups the newest ``wanted`` items do not reach are left out.
            while sizes and counted - counts[0] >= wanted:
                counted -= counts.pop(0)
                del messages[: sizes.pop(0)]
        return messages, sizes, first

    async def _next_page(self, seam: HistoryGroup, groups: int, first: HistoryPage) -> HistoryPage | None:
        """The page of ``groups`` groups ending with ``seam``; ``None`` when the session changed meanwhile.

        Appends between two pages leave the older groups as they were; a retraction or a
        reset changes the view; an erasure of the session (and its id used again) changes
        the groups at the same seqs. The page is read from the seam on, so its newest group
        must be the seam itself, as the page before saw it: otherwise the pages could mix
        items an erasure removed with the new session's (or a retraction's before and after).
        """
        try:
            page = await self.runtime.read_history(
                self.identity, self.session_id, before_seq=seam.group.seq + 1, max_groups=groups, copy=False
            )
        except InvalidArgumentError:
            # The seam's seq is past the session's next seq: the session was erased meanwhile.
            return None
        return page if page.joins(first, seam) else None

    async def _retrying(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run ``write``; while it is refused as busy or loses a race uncommitted, back off and retry."""
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.002
        while True:
            try:
                return await write()
            except (SessionBusyError, SessionConflictError) as exc:
                # Refused as erased since the read: the same write would be refused again.
                retryable = isinstance(exc, SessionBusyError) or (
                    exc.commit_state is CommitState.NOT_COMMITTED
                    and not isinstance(exc, ErasedSinceReadError)
                )
                if not retryable or time.monotonic() + delay > deadline:
                    raise
            # Jitter keeps writers that collided from colliding again in step.
            await anyio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.1)
