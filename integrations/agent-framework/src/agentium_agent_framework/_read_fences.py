"""Which load (``get_messages``) each save of a session id follows: the erasure fences a provider keeps.

A save passes the fence of a load to ``append(after_read=...)``, so that an
erasure of the session since that load refuses it. Which load: the run's
own, but a provider cannot tell runs apart (the framework gives it only a
session id). With two runs of one id at once, the later load may come
after an erasure the earlier run's messages were made before, so the
latest load will not do. So a save follows the *oldest* load still
waiting for its save. A save that commits proves no erasure of the
session ran from that fence to its own load, so the fence moves on to the
newest load made before the save began. A refused save condemns the loads
still waiting (which of them came before the erasure cannot be told):
the next saves, as many, follow the refused fence; loads after the
refusal start afresh. A run that fails before its save leaves its load
counted: after an erasure it costs up to two more refusals (the next
save follows it, then it is condemned), otherwise it holds the fence one
load back; both conservative, neither for good.

That matching by order is a guess, and can be wrong: runs A and B load
before an erasure, A's save is refused, then run C loads and saves; if
C's save took the refusal meant for B, B's save would follow C's load,
made after the erasure, and commit. So a run of an ``Agent`` is matched
exactly (:class:`RunLoads`): the framework gives ``before_run`` and
``after_run`` the run's own ``SessionContext``, and the load made in one
is the fence of the save made in the other, whatever other runs do. The
order above is left for ``get_messages`` and ``save_messages`` called
directly, which name no run.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from weakref import WeakKeyDictionary

from agentium_harness import ReadFence

__all__ = ["Following", "ReadFences", "RunLoad", "RunLoads"]


class _Loads:
    """The loads of one session id: the fence saves follow, and how many saves are still to come."""

    __slots__ = ("condemned", "held", "newest", "stale", "waiting")

    def __init__(self) -> None:
        self.held: ReadFence | None = None  # the oldest load waiting (or the last one, none waiting)
        self.newest: ReadFence | None = None
        self.waiting = 0  # loads with no save since
        self.stale: ReadFence | None = None  # a fence a save was refused at
        self.condemned = 0  # saves still to follow ``stale``: loads waiting when it was refused


class Following:
    """What one save follows: its fence, and what it moves the fence on to if it commits."""

    __slots__ = ("condemned", "fence", "loads", "newest")

    def __init__(self, loads: _Loads, fence: ReadFence, newest: ReadFence | None, condemned: bool) -> None:
        self.loads, self.fence, self.newest, self.condemned = loads, fence, newest, condemned


class ReadFences:
    """The loads of up to ``limit`` session ids (the least recently loaded dropped first).

    One provider serves every thread that holds it (the SDK's concurrent-access
    pattern: threads, each with its own event loop, one provider object), so
    each method reads and changes the loads under one lock: a save beginning
    on one thread while a load on another moved its id (taken out, put back)
    found no load and followed no fence, and an erasure since went unchecked.
    """

    __slots__ = ("_ids", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._ids: OrderedDict[str, _Loads] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def loaded(self, sid: str, fence: ReadFence | None) -> None:
        """``get_messages`` of ``sid`` read at ``fence``; a save of it is to come."""
        if fence is None:
            return
        with self._lock:
            self._loaded(sid, fence)

    def _loaded(self, sid: str, fence: ReadFence) -> None:
        loads = self._ids.pop(sid, None) or _Loads()
        if loads.waiting == 0:
            loads.held = fence  # no other run's save to come: this load is the one to follow
        loads.newest = fence
        loads.waiting += 1
        self._ids[sid] = loads
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def follow(self, sid: str) -> Following | None:
        """What a save of ``sid`` beginning now follows; ``None``: no load of it is kept."""
        with self._lock:
            return self._follow(sid)

    def _follow(self, sid: str) -> Following | None:
        loads = self._ids.get(sid)
        if loads is None:
            return None
        if loads.condemned > 0 and loads.stale is not None:
            return Following(loads, loads.stale, None, True)
        if loads.held is None:
            return None
        return Following(loads, loads.held, loads.newest, False)

    def ended(self, sid: str, following: Following | None, *, refused: bool, committed: bool) -> None:
        """A save that followed ``following`` ended: ``refused`` (erased since), ``committed``, or neither."""
        if following is None:
            return
        with self._lock:
            self._ended(sid, following, refused, committed)

    def _ended(self, sid: str, following: Following, refused: bool, committed: bool) -> None:
        loads = following.loads
        if self._ids.get(sid) is not loads:
            return  # dropped from the ids kept meanwhile
        if following.condemned:
            loads.condemned = max(0, loads.condemned - 1)
        else:
            loads.waiting = max(0, loads.waiting - 1)
            if refused and loads.held is following.fence:
                # Every load still waiting may be from before the erasure: as many saves follow this.
                loads.stale, loads.condemned = following.fence, loads.condemned + loads.waiting
                loads.held = loads.newest = None
                loads.waiting = 0
            elif committed and following.newest is not None and loads.held is following.fence:
                loads.held = following.newest
        if loads.held is None and loads.condemned == 0:
            del self._ids[sid]  # nothing to follow: a save with no load since follows none


class RunLoad:
    """One framework run's load of its session id: the fence its own save follows."""

    __slots__ = ("fence", "owner", "sid")

    def __init__(self, owner: object, sid: str | None = None, fence: ReadFence | None = None) -> None:
        self.owner, self.sid, self.fence = owner, sid, fence


#: The run whose ``before_run`` (loading) or ``after_run`` (saving) is under way, in this task.
_LOADING: ContextVar[RunLoad | None] = ContextVar("agentium_af_loading", default=None)
_SAVING: ContextVar[RunLoad | None] = ContextVar("agentium_af_saving", default=None)


class RunLoads:
    """The load of each framework run still alive, by its ``SessionContext`` (weakly: gone with the run).

    A run that fails before its save leaves nothing behind: its context is
    dropped, and with it its load. Its own provider's calls only (``owner``).
    """

    __slots__ = ("_owner", "_runs")

    def __init__(self, owner: object) -> None:
        self._owner = owner
        self._runs: WeakKeyDictionary[object, RunLoad] = WeakKeyDictionary()

    @contextmanager
    def loading(self, context: object) -> Iterator[None]:
        """Inside: a ``get_messages`` of this provider is the load of the run of ``context``."""
        run = RunLoad(self._owner)
        token = _LOADING.set(run)
        try:
            yield
        finally:
            _LOADING.reset(token)
        if run.sid is not None:  # it loaded (only once every message decoded)
            self._runs[context] = run

    @contextmanager
    def saving(self, context: object) -> Iterator[None]:
        """Inside: a ``save_messages`` of this provider is the save of the run of ``context``."""
        token = _SAVING.set(self._runs.get(context))
        try:
            yield
        finally:
            _SAVING.reset(token)

    def loaded(self, sid: str, fence: ReadFence | None) -> bool:
        """Keep ``fence`` as the load of the run loading now; ``False``: no run of this provider is."""
        run = _LOADING.get()
        if run is None or run.owner is not self._owner:
            return False
        run.sid, run.fence = sid, fence
        return True

    def saving_run(self, sid: str) -> RunLoad | None:
        """The load of the run whose save of ``sid`` this is; ``None``: not a run that loaded ``sid``."""
        run = _SAVING.get()
        return run if run is not None and run.owner is self._owner and run.sid == sid else None
