"""Background work a drain covers beyond its own items, and which owner's work a drain takes.

Split from :mod:`.work` (the tracker): a :class:`WorkSource` is work another
component owns (the runtime's summary updates, :class:`OwnedWorkSource`);
:class:`AllBut`, :func:`covers` and :func:`belongs` decide which owner's work
(a runtime's, held weakly: :func:`weak_owner`) a drain takes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..owned_work import OwnedWork
from .drain_result import DrainItem, DrainStatus

__all__ = ["AllBut", "OwnedWorkSource", "WorkSource", "belongs", "covers", "let_go", "weak_owner"]


@runtime_checkable
class WorkSource(Protocol):
    """Background work another component owns that a drain must cover (the runtime's summary updates)."""

    def pending(self) -> Sequence[str]:
        """Names of the items running now."""
        ...

    async def settle(self, timeout_s: float) -> Sequence[DrainItem]:
        """Wait up to ``timeout_s`` for the running items, cancel the rest; one :class:`DrainItem` each."""
        ...


class OwnedWorkSource:
    """The runtime's :class:`~agentium_harness._engine.owned_work.OwnedWork` as a :class:`WorkSource`.

    Each background summary update is one item, named
    ``summary update <tenant>/<user>/<session>`` (encoded segments).
    """

    def __init__(self, work: OwnedWork, owner: object = None) -> None:
        self._work = work
        # The runtime whose updates these are (held weakly): its own drain covers them, not another's.
        self._owner = weak_owner(owner)
        #: Set at the runtime's close: the tracker lets go of it once none of its updates runs.
        self.retired = False

    @property
    def owner(self) -> object:
        """The runtime whose summary updates these are (``None`` if not given, or gone)."""
        return self._owner() if self._owner is not None else None

    def _keys(self) -> list[Any]:
        return self._work.running()

    def pending(self) -> Sequence[str]:
        """Names of the summary updates running now."""
        return [f"summary update {k.key()}" for k in self._keys()]

    async def settle(self, timeout_s: float, grace_s: float | None = None) -> Sequence[DrainItem]:
        """Settle the summary updates: wait ``timeout_s``, cancel, wait ``grace_s`` for them to stop.

        Without ``grace_s`` the timeout is split in two halves. Updates started
        while it waits are covered too, and one that failed or was cancelled
        since the last drain is reported even if it ended before.
        """
        items, _dropped = await self.settle_counted(timeout_s, grace_s)
        return items

    async def settle_counted(
        self, timeout_s: float, grace_s: float | None = None
    ) -> tuple[list[DrainItem], dict[DrainStatus, int]]:
        """As :meth:`settle`, plus how many failed or cancelled updates were dropped unlisted, by status.

        Past ``owned_work.MAX_KEPT_REPORTS`` sessions, the oldest unreported
        failures are only counted (a drain adds them to its ``dropped_*``).
        """
        items = []
        reports, dropped = await self._work.drain(timeout_s, grace_s)
        for key, report, stopped in reports:
            detail = "; ".join(d.message for d in report.diagnostics)
            items.append(
                DrainItem(
                    f"summary update {key.key()}",
                    "summary",
                    DrainStatus(report.status.value),
                    detail,
                    stopped,
                )
            )
        counts = {DrainStatus(status.value): n for status, n in dropped.items()}
        return sorted(items, key=lambda i: i.name), counts


def let_go(source: OwnedWorkSource) -> bool:
    """Whether a tracker may stop tracking ``source``: retired, none of its updates runs, no report owed."""
    return source.retired and source._work.idle()


def weak_owner(owner: object) -> Callable[[], object] | None:
    """A weak reference to ``owner`` (``None`` for none): a manager's work must not keep a runtime alive."""
    return weakref.ref(owner) if owner is not None else None


@attrs.frozen(slots=True)
class AllBut:
    """A drain scope: all the work except the work of ``owners`` (runtimes whose own close drains it)."""

    owners: tuple[object, ...]


def covers(only: object, owner: object) -> bool:
    """Whether a drain of ``only`` (``None``: all; an :class:`AllBut`; an owner) covers ``owner``'s work."""
    if only is None:
        return True
    if isinstance(only, AllBut):
        return owner is None or not any(owner is o for o in only.owners)
    return owner is not None and owner is only


def belongs(owner: Callable[[], object] | None, only: object) -> bool:
    """Whether work of ``owner`` (held weakly) is covered by a drain of ``only`` (:func:`covers`)."""
    return covers(only, owner() if owner is not None else None)
