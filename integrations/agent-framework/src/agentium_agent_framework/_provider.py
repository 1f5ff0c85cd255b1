"""``AgentiumHistoryProvider``: Microsoft Agent Framework's ``HistoryProvider`` over the history API."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import anyio
from agent_framework import AgentSession, HistoryProvider, SessionContext, SupportsAgentRun
from agent_framework import Message as AFMessage

from agentium_harness import (
    MAX_APPEND_BYTES,
    MAX_PAGE_BYTES,
    MAX_PAGE_GROUPS,
    AgentiumError,
    CommitState,
    ErasedSinceReadError,
    HarnessRuntime,
    HistoryGroup,
    HistoryPage,
    InvalidArgumentError,
    Message,
    MessageGroup,
    ReadFence,
    RecallScope,
    SessionBusyError,
    SessionConflictError,
    VerifiedIdentity,
)
from agentium_harness.plugin_api import SessionKey

from ._arguments import checked_options
from ._exchanges import whole_exchanges, without_half_exchanges
from ._messages import MESSAGE_FORMAT, ForeignMessageError, from_agentium, listed, to_agentium
from ._observe import failed, group_cut, reported, traced
from ._read_fences import ReadFences, RunLoads
from ._replay import Identity, Tail, message_identity
from ._restarts import SAVE_RESTARTS, Restarts, not_committed

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "MESSAGE_FORMAT",
    "AgentiumHistoryProvider",
    "ForeignMessageError",
    "MissingSessionIdError",
    "ReplayCheckLimitError",
]

T = TypeVar("T")

#: How many messages ``get_messages`` returns at most, unless the provider is built with another bound.
DEFAULT_MAX_MESSAGES: Final = 200
#: How many canonical bytes of groups ``get_messages`` returns at most, unless built with another bound:
#: a group a save commits is at most this large (``MAX_APPEND_BYTES``), so the newest always fits whole.
DEFAULT_MAX_BYTES: Final = MAX_APPEND_BYTES
#: Session ids whose loads' erasure fences a provider keeps (the least recently loaded go first).
MAX_READ_FENCES: Final = 4096
#: The largest ``max_messages`` a provider takes.
MAX_MESSAGES_CEILING: Final = 10_000


class MissingSessionIdError(InvalidArgumentError):
    """The framework called the provider without a session id; nothing was read or written.

    Run the agent with an ``AgentSession`` (``agent.create_session()``):
    Agentium keeps history per session of the bound identity.
    """


class ReplayCheckLimitError(InvalidArgumentError):
    """``save_messages`` could not tell which messages repeat history within its read bound: nothing written.

    The messages given repeat the session's last messages further back than
    the replay check reads (``max(max_bytes, MAX_APPEND_BYTES)`` canonical
    bytes of the view's tail): storing them could store a message twice,
    dropping them could lose a new one, so neither is done. Send only the
    new messages, or build the provider with a larger ``max_bytes``.
    """


def _replay_refused(sid: str, budget: int) -> ReplayCheckLimitError:
    refused = ReplayCheckLimitError(
        f"the messages given to save_messages repeat the last messages of session {sid!r} further back "
        f"than the {budget} bytes of its tail the replay check reads; nothing was written: send only "
        "the new messages, or use a larger max_bytes"
    )
    refused.commit_state = CommitState.NOT_COMMITTED
    failed("save_messages", refused, f"the replay check passed its read bound of {budget} bytes")
    return refused


class AgentiumHistoryProvider(HistoryProvider):
    """Agent Framework conversation history kept as Agentium canonical history.

    Add it to an agent's ``context_providers``. As the framework's
    ``HistoryProvider`` contract defines: before a run, ``get_messages``
    loads the session's history into the context (unless ``load_messages``
    is false); after a run, ``save_messages`` stores the run's input and
    response messages (per ``store_inputs``, ``store_outputs`` and
    ``store_context_messages``/``store_context_from``).

    - ``save_messages`` is one ``HarnessRuntime.append``: one call, one group,
      each message kept whole as its payload (``to_dict()``, format
      :data:`MESSAGE_FORMAT`) with readable text as its content. Messages
      replaying the view's last ones are not stored again; to tell, the save
      reads the view's tail only until it decides, and at most
      ``max(max_bytes, MAX_APPEND_BYTES)`` bytes of it: past that it is
      refused with :class:`ReplayCheckLimitError`, nothing written.
    - ``get_messages`` returns the newest messages of the session's view,
      oldest first, **at most** ``max_messages`` (whole groups, so a call and
      its result stay together; only a single group larger than the bound
      is cut to its newest ``max_messages`` messages, never inside a tool
      exchange of Agentium's own ``run()``), and **at most**
      ``max_bytes`` canonical bytes of groups (the newest whole groups that
      fit; a newest group over it alone gives its newest messages that fit),
      and it reads at most that many groups (a page after the first also reads the seam: the
      oldest group of the page before, again). A function call or result
      whose other half is not in the load (a retraction or the bound left
      it) is left out of its message (:mod:`._exchanges`), never handed to
      the framework, which would send it to the model as it is. A load, or
      a save's read of the tail, whose pages a retraction, a reset or an
      erasure of the session came between starts again. Damaged history
      fails the load with a typed error.
    - The identity is bound here, by the host that verified it; the
      framework's ``session_id`` only names a session of that identity.
      ``state`` (the framework's session state) is not used: history lives
      in Agentium, not in the serialized session.

    The runtime is borrowed. Writes refused as busy (another operation of
    this runtime holds the session), losing a compare-and-set race, or
    refused uncommitted with the session unchanged (an erasure of the
    tenant ran meanwhile) are retried with back-off for up to ``busy_timeout_s``.
    A load whose pages a change split reads again for at least 3 attempts, a
    save that lost its race for at least 5, then with back-off until
    ``busy_timeout_s`` is spent (:mod:`._restarts`).
    """

    DEFAULT_SOURCE_ID: Final = "agentium"

    def __init__(
        self,
        runtime: HarnessRuntime,
        identity: VerifiedIdentity,
        *,
        source_id: str = DEFAULT_SOURCE_ID,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        recall_scope: RecallScope | None = None,
        busy_timeout_s: float = 30.0,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
    ) -> None:
        """Bind the provider to ``runtime`` and the host-verified ``identity``; bad arguments raise.

        ``InvalidArgumentError`` for a bound, ``busy_timeout_s``, ``source_id``
        (a non-empty str) or ``store_context_from`` (a set of str, or ``None``)
        of the wrong type or range, and for a flag (``load_messages``,
        ``store_inputs``, ``store_context_messages``, ``store_outputs``) that
        is not exactly ``True`` or ``False``; ``IdentityError`` for an identity
        or a ``recall_scope`` of the wrong type.
        """
        # InvalidArgumentError is a TypeError and a ValueError: callers catching those still do.
        if not isinstance(runtime, HarnessRuntime):
            raise InvalidArgumentError(f"runtime must be a HarnessRuntime, got {type(runtime).__name__}")
        SessionKey.of(identity, "probe")  # checks the identity's type now, not on the first run
        if isinstance(max_messages, bool) or not isinstance(max_messages, int):
            raise InvalidArgumentError(f"max_messages must be an int, got {type(max_messages).__name__}")
        if not 1 <= max_messages <= MAX_MESSAGES_CEILING:
            raise InvalidArgumentError(
                f"max_messages must be 1 to {MAX_MESSAGES_CEILING}, got {max_messages}"
            )
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise InvalidArgumentError(f"max_bytes must be an int, got {type(max_bytes).__name__}")
        if not 1 <= max_bytes <= MAX_PAGE_BYTES:
            raise InvalidArgumentError(f"max_bytes must be 1 to {MAX_PAGE_BYTES}, got {max_bytes}")
        if (
            isinstance(busy_timeout_s, bool)
            or not isinstance(busy_timeout_s, int | float)
            or not 0 <= busy_timeout_s <= 3600
        ):
            raise InvalidArgumentError(f"busy_timeout_s must be 0 to 3600 seconds, got {busy_timeout_s!r}")
        source_id, store_context_from = checked_options(
            source_id,
            {
                "load_messages": load_messages,
                "store_inputs": store_inputs,
                "store_context_messages": store_context_messages,
                "store_outputs": store_outputs,
            },
            store_context_from,
            recall_scope,
        )
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.runtime = runtime
        self.identity = identity
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.recall_scope = recall_scope
        self.busy_timeout_s = float(busy_timeout_s)
        # Per session id, the erasure fences of its get_messages (the runs' input): saves follow the
        # oldest load still waiting, so an erasure since refuses them (docs/runtime.md). Bounded.
        self._fences = ReadFences(MAX_READ_FENCES)
        # An agent run's own load, for its own save (exact, whatever other runs of the id do).
        self._runs = RunLoads(self)

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Load the history as the framework does, keeping the load as this run's own (for its save)."""
        with self._runs.loading(context):
            await super().before_run(agent=agent, session=session, context=context, state=state)

    async def after_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Save as the framework does; the save follows this run's own load (``before_run``)."""
        with self._runs.saving(context):
            await super().after_run(agent=agent, session=session, context=context, state=state)

    def _session(self, session_id: str | None) -> str:
        if session_id is None:
            raise MissingSessionIdError(
                "the agent ran without a session id; run it with an AgentSession (agent.create_session())"
            )
        if isinstance(session_id, str):
            # A str subclass runs its own code wherever the id is checked or keyed (its len, its
            # iteration, its encode): the exact str of its characters runs none (str.__str__).
            session_id = str.__str__(session_id)
        SessionKey.of(self.identity, session_id)  # InvalidIdError for an id Agentium cannot key
        return session_id

    @reported("get_messages")
    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[AFMessage]:
        """The newest messages of the view, oldest first: within ``max_messages`` and ``max_bytes``."""
        sid = self._session(session_id)
        restarts = Restarts(self.busy_timeout_s)  # each change is a writer committing: go on a while
        async for _ in restarts:
            newest = await self._newest(sid)
            if newest is not None:
                chosen, fence = newest
                decoded = self._decode(sid, chosen)
                if not self._runs.loaded(sid, fence):  # only once every message decoded
                    self._fences.loaded(sid, fence)
                return decoded
        refused = SessionConflictError(
            f"the view of session {sid!r} changed between the pages of every read "
            f"({restarts.made} attempts); nothing was changed: load again"
        )
        refused.commit_state = CommitState.NOT_COMMITTED
        raise refused

    async def _newest(self, sid: str) -> tuple[list[Message], ReadFence | None] | None:
        """The messages ``get_messages`` returns, with its first read's fence; ``None``: the view changed."""
        chosen: list[Message] = []
        used = 0  # canonical bytes of the groups chosen
        first: HistoryPage | None = None
        seam: HistoryGroup | None = None  # the oldest group read so far; the next page ends with it
        while True:
            # Each group shown holds at least one message: never more groups than messages still wanted.
            wanted = self.max_messages - len(chosen)
            if first is None:
                asked = min(MAX_PAGE_GROUPS, wanted)
                try:
                    # Core reads no more than max_bytes (and one group) from the archive for the page.
                    page = first = await self.runtime.read_history(
                        self.identity, sid, max_groups=asked, max_bytes=self.max_bytes
                    )
                except InvalidArgumentError:
                    # The newest group alone is over max_bytes: its newest messages that fit.
                    alone = await self.runtime.read_history(self.identity, sid, max_groups=1)
                    return (self._newest_of(alone.groups[-1]) if alone.groups else []), alone.read_fence
                groups: Sequence[HistoryGroup] = page.groups
            else:
                assert seam is not None  # set from every page that has one after it
                asked = min(MAX_PAGE_GROUPS, wanted + 1)
                # The seam is read again: its bytes are counted by core, not by this load.
                room = min(MAX_PAGE_BYTES, self.max_bytes - used + seam.size_bytes)
                later = await self._page_after(sid, seam, asked, first, copy=True, max_bytes=room)
                if later is None:
                    return None
                page = later
                groups = page.groups[:-1]  # the seam's messages are chosen already
            for group in reversed(groups):  # newest first
                shown = group.messages
                if len(chosen) + len(shown) > self.max_messages or used + group.size_bytes > self.max_bytes:
                    if not chosen:  # one group over the bound alone: its newest messages
                        chosen = self._newest_of(group)
                    return chosen, first.read_fence
                chosen[:0] = shown
                used += group.size_bytes
            if page.next_before_seq is None or len(chosen) >= self.max_messages or len(page.groups) < asked:
                # Fewer groups than asked with more to come: core stopped at max_bytes.
                return chosen, first.read_fence
            seam = page.groups[0]

    def _newest_of(self, group: HistoryGroup) -> list[Message]:
        """The newest messages of one group over a bound: within ``max_messages`` and ``max_bytes``.

        Each message is measured as a group of its own (its canonical bytes and a group's few
        more), so the messages returned never pass ``max_bytes`` together. Where that cut would
        leave a tool result of Agentium's own ``run()`` without its call, the messages begin
        after that exchange instead (:func:`whole_exchanges`): fewer, never half an exchange.
        """
        kept: list[Message] = []
        used = 0
        for message in reversed(group.messages[-self.max_messages :]):
            size = MessageGroup(seq=group.seq, messages=(message,)).size_bytes
            if used + size > self.max_bytes:
                break
            kept.append(message)
            used += size
        kept.reverse()
        kept = whole_exchanges(kept)
        if len(kept) < len(group.messages):
            group_cut(group.seq, len(kept), len(group.messages))
        return kept

    async def _page_after(
        self,
        sid: str,
        seam: HistoryGroup,
        groups: int,
        first: HistoryPage,
        *,
        copy: bool,
        max_bytes: int | None = None,
    ) -> HistoryPage | None:
        """The page of ``groups`` groups ending with ``seam``; ``None`` when the session changed meanwhile.

        Appends between two pages leave the older groups as they were. A retraction or a
        reset changes the view: together the pages would be no view that ever was (a reset
        would cut the load short, a retraction mix before and after). An erasure of the
        session (its id perhaps used again at once) changes the groups at the same seqs, so
        each later page is read from the seam on and must end with the seam as the page
        before saw it: otherwise the pages could mix erased messages with the new session's.
        """
        try:
            page = await self.runtime.read_history(
                self.identity,
                sid,
                before_seq=seam.seq + 1,
                max_groups=groups,
                max_bytes=max_bytes,
                copy=copy,
            )
        except InvalidArgumentError:
            # The seam's seq is past the session's next seq: the session was erased meanwhile.
            return None
        return page if page.joins(first, seam) else None

    def _decode(self, sid: str, messages: Sequence[Message]) -> list[AFMessage]:
        # Never half a tool exchange (what a retraction or the bound leaves): see ._exchanges.
        return without_half_exchanges(
            [from_agentium(m, f"message {i} of the view of session {sid!r}") for i, m in enumerate(messages)]
        )

    @traced("save_messages")
    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[AFMessage],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Commit the new ones of ``messages`` as one group (nothing if none); refused input writes nothing.

        As the framework's own providers do, messages repeating the view's last messages in
        order (a host replaying the whole transcript as input) are not stored again (see
        :mod:`._replay`). The view's tail is read first, newest first and only until it decides
        which messages repeat it, within ``max(max_bytes, MAX_APPEND_BYTES)`` bytes (past that,
        :class:`ReplayCheckLimitError` and nothing is written), and the group appended only at
        the revision it was read at: a write landing in between makes it read again (at least 5
        attempts, then with jittered back-off until ``busy_timeout_s``; then
        ``SessionConflictError``, ``not_committed``). A message of this framework in that tail
        that does not decode fails the save as it fails a load (:class:`ForeignMessageError`,
        nothing written); every error of that read says ``commit_state`` ``not_committed``.

        In an agent run, the save follows the run's own load (``before_run``). Called directly,
        after a ``get_messages`` of the session id by this provider, the save follows the oldest
        load whose save is still to come (with two runs at once, the earlier run's;
        ``append(after_read=...)``): if an erasure of the session (its own, its user's or its
        tenant's) began or finished since, it raises ``ErasedSinceReadError`` (``not_committed``;
        nothing written, not retried), and once no run's save is left to come, the load is
        forgotten: load again.
        """
        sid = self._session(session_id)
        # A str or a mapping would be iterated as characters or keys, and None is no list of messages.
        if isinstance(messages, str | bytes | bytearray | Mapping) or not isinstance(messages, Sequence):
            raise ForeignMessageError(
                f"save_messages takes a list of agent_framework.Message objects, got "
                f"{type(messages).__name__}; nothing was written"
            )
        given = listed(messages)
        if not given:
            return
        converted = [to_agentium(m) for m in given]
        try:
            # A message's id (any object the host set) and role are turned into text here, by the
            # host's own code: whatever that raises is a typed error, for every save alike.
            incoming = [message_identity(m) for m in given]
        except Exception as exc:
            raise ForeignMessageError(
                f"a message's id or contents could not be read to compare it with the session's last "
                f"messages ({type(exc).__name__} raised); nothing was written"
            ) from exc
        run = self._runs.saving_run(sid)
        if run is not None:  # an agent run's save: its own run's load
            await self._save(sid, converted, incoming, run.fence)
            return
        following = self._fences.follow(sid)  # the load this save follows (None: none by this provider)
        fence = following.fence if following is not None else None
        try:
            appended = await self._save(sid, converted, incoming, fence)
        except ErasedSinceReadError:
            self._fences.ended(sid, following, refused=True, committed=False)
            raise
        except BaseException:
            self._fences.ended(sid, following, refused=False, committed=False)  # failed: the fence holds
            raise
        self._fences.ended(sid, following, refused=False, committed=appended)

    async def _save(
        self, sid: str, converted: list[Message], incoming: list[Identity], fence: ReadFence | None
    ) -> bool:
        """:meth:`save_messages` once its messages are checked; whether it appended (not all repeated)."""
        # The last append refused uncommitted, and the revision it was refused at.
        last: tuple[SessionConflictError, int] | None = None
        deadline, delay = time.monotonic() + self.busy_timeout_s, 0.002
        # Each race lost is another writer committing: go on, paced, as a load does (._restarts).
        restarts = Restarts(self.busy_timeout_s, SAVE_RESTARTS)
        async for _ in restarts:
            try:
                repeated = await self._repeated(sid, incoming)
            except AgentiumError as exc:  # a read's errors carry no commit_state: this save wrote nothing
                not_committed(exc)
                raise
            if repeated is None:
                continue  # the session changed between two pages of its tail: read it again
            skip, revision = repeated
            fresh = converted[skip:]
            if not fresh:
                return False
            if last is not None and last[1] == revision:
                # Refused, nothing written since (an erasure of the tenant ran, docs/runtime.md): no
                # race lost, no restart spent; back off within busy_timeout_s, then raise that refusal.
                if time.monotonic() + delay > deadline:
                    raise last[0]
                restarts.uncount()
                await anyio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)

            async def add(
                revision: int = revision, fresh: list[Message] = fresh
            ) -> SessionConflictError | None:
                try:
                    await self.runtime.append(
                        self.identity,
                        sid,
                        fresh,
                        recall_scope=self.recall_scope,
                        expected_revision=revision,
                        after_read=fence,
                    )
                except SessionConflictError as exc:
                    if exc.commit_state is not CommitState.NOT_COMMITTED or isinstance(
                        exc, ErasedSinceReadError
                    ):
                        raise
                    return exc  # the session moved on since the read (or see above): read its tail again
                return None

            try:
                lost = await self._retrying(add)
            except ErasedSinceReadError as exc:
                raise self._erased_since_load(sid) from exc
            if lost is None:
                return True
            last = (lost, revision)
        refused = SessionConflictError(
            f"session {sid!r} changed between every read of its last messages and the save "
            f"({restarts.made} attempts); nothing was written: save again"
        )
        refused.commit_state = CommitState.NOT_COMMITTED
        failed("save_messages", refused)
        raise refused from (last[0] if last is not None else None)

    def _erased_since_load(self, sid: str) -> ErasedSinceReadError:
        """The save's refusal after an erasure since the load it follows."""
        refused = ErasedSinceReadError(
            f"session {sid!r} may have been erased since get_messages loaded it (an erasure of it, its "
            "user or its tenant began or finished meanwhile); the messages were made from that load, "
            "so nothing was written: load the session again"
        )
        refused.commit_state = CommitState.NOT_COMMITTED
        return refused

    async def _repeated(self, sid: str, incoming: list[Identity]) -> tuple[int, int] | None:
        """How many of the first ``incoming`` repeat the view's last messages, and the revision read at.

        The tail is read newest first, whole groups, only until it decides (:func:`._replay.decided`,
        or :meth:`Tail.covers` ``len(incoming)``, or the whole view), and within the replay bound: up to
        ``max(max_bytes, MAX_APPEND_BYTES)`` canonical bytes, and past them one group (core stops a
        page there) and each later page's seam again. Past the bound the save is refused
        (:class:`ReplayCheckLimitError`): storing could store a message twice, dropping could lose
        a new one. ``None`` when the session changed between two pages.
        """
        count, budget = len(incoming), max(self.max_bytes, MAX_APPEND_BYTES)
        tail = Tail()  # the view's last messages read, oldest first
        used = 0  # canonical bytes of the groups read (the seams once)
        first: HistoryPage | None = None
        seam: HistoryGroup | None = None
        step = 1  # groups a page reads: one first (it usually decides), then twice as many each page
        while True:
            # Each group shown holds at least one message: never more groups than messages still wanted.
            wanted = max(1, count - len(tail))  # covers() may want more than count
            # No copy: the messages are only compared, never kept or changed.
            if first is None:
                asked = 1
                try:
                    page = first = await self.runtime.read_history(
                        self.identity, sid, max_groups=asked, max_bytes=budget, copy=False
                    )
                except InvalidArgumentError:  # the newest group alone is over the bound
                    raise _replay_refused(sid, budget) from None
                groups: Sequence[HistoryGroup] = page.groups
            else:
                assert seam is not None  # set from every page that has one after it
                step = min(2 * step, wanted)
                asked = min(MAX_PAGE_GROUPS, step + 1)
                room = min(MAX_PAGE_BYTES, budget - used + seam.size_bytes)  # the seam is read again
                later = await self._page_after(sid, seam, asked, first, copy=False, max_bytes=room)
                if later is None:
                    return None
                page = later
                groups = page.groups[:-1]  # the seam's messages are read already
            older: list[AFMessage | None] = []
            for group in groups:
                used += group.size_bytes
                for m in group.messages:
                    if m.payload_format is not None and m.payload_format != MESSAGE_FORMAT:
                        older.append(None)  # another framework's message: it repeats nothing of ours
                        continue
                    # Ours, undecodable: damage fails the save closed as a load (else a replay is kept twice).
                    try:
                        older.append(from_agentium(m, f"message of group {group.seq} of session {sid!r}"))
                    except ForeignMessageError as exc:
                        exc.commit_state = CommitState.NOT_COMMITTED
                        failed("save_messages", exc)
                        raise
            tail.prepend(older)
            if page.next_before_seq is None or tail.covers(count) or tail.decided(incoming):
                return tail.repeated(incoming), first.snapshot_revision
            if len(page.groups) < asked or used >= budget:  # core stopped at the bound: undecided
                raise _replay_refused(sid, budget)
            seam = page.groups[0]

    async def _retrying(self, write: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.002
        while True:
            try:
                return await write()
            except (SessionBusyError, SessionConflictError) as exc:
                # Refused as erased since the load: the same write would be refused again.
                retryable = isinstance(exc, SessionBusyError) or (
                    exc.commit_state is CommitState.NOT_COMMITTED
                    and not isinstance(exc, ErasedSinceReadError)
                )
                if not retryable or time.monotonic() + delay > deadline:
                    raise
            await anyio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.1)
