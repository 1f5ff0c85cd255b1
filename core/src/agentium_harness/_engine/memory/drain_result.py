"""What a drain of owned memory work reports: each item's status, and the counts (R40).

Split from :mod:`.work` (the tracker that produces them); hosts import these
names from ``agentium_harness``.
"""

from __future__ import annotations

import enum

import attrs

from ..._errors import InvalidArgumentError

__all__ = ["DrainItem", "DrainResult", "DrainStatus"]


class DrainStatus(enum.StrEnum):
    """How one item of owned work ended, as a drain saw it."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@attrs.frozen(slots=True)
class DrainItem:
    """One item of owned work: its name, kind (``extraction``, ``final-write``, ``summary``…), how it ended.

    ``stopped`` is False only for a cancelled item that had not stopped when
    the drain returned (it is still tracked). ``fact_ids``: for an extraction
    an erasure overtook whose take-back failed, the facts it left stored, to
    forget (its error's ``ErasureInProgressError.fact_ids``; ``detail`` names
    them only with content capture, an id being content).
    """

    name: str
    kind: str
    status: DrainStatus = attrs.field(converter=DrainStatus)
    detail: str = ""
    stopped: bool = True
    fact_ids: tuple[str, ...] = ()


@attrs.frozen(slots=True)
class DrainResult:
    """What one drain saw, item by item (R40). ``notes`` lists lifecycle hooks that raised.

    Between two drains at most ``MAX_ENDED_ITEMS`` (1000) ended items are kept
    (the oldest completed ones are dropped first); ``dropped_completed``,
    ``dropped_failed`` and ``dropped_cancelled`` count the items that ended
    but are not in ``items``. :meth:`count`, :attr:`ok` and :meth:`describe`
    include them; ``completed``, ``failed`` and ``cancelled`` name the kept items.
    Summary updates that failed or were cancelled unreported are kept for the
    1000 most recent sessions (``owned_work.MAX_KEPT_REPORTS``); older ones
    are counted the same way.
    """

    items: tuple[DrainItem, ...] = ()
    timeout_s: float = 0.0
    notes: tuple[str, ...] = ()
    dropped_completed: int = 0
    dropped_failed: int = 0
    dropped_cancelled: int = 0

    def _names(self, status: DrainStatus) -> tuple[str, ...]:
        return tuple(i.name for i in self.items if i.status is status)

    @property
    def completed(self) -> tuple[str, ...]:
        """Names of the items that completed."""
        return self._names(DrainStatus.COMPLETED)

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the items that raised."""
        return self._names(DrainStatus.FAILED)

    @property
    def cancelled(self) -> tuple[str, ...]:
        """Names of the items that were cancelled (past the timeout, or by their owner)."""
        return self._names(DrainStatus.CANCELLED)

    @property
    def still_running(self) -> tuple[str, ...]:
        """Names of cancelled items that had not stopped yet when the drain returned."""
        return tuple(i.name for i in self.items if not i.stopped)

    def count(self, status: DrainStatus | str) -> int:
        """How many items ended with ``status``: those listed plus those dropped unlisted."""
        if status not in tuple(DrainStatus):
            raise InvalidArgumentError(f"status must be a DrainStatus, got {status!r}")
        status = DrainStatus(status)
        dropped = {
            DrainStatus.COMPLETED: self.dropped_completed,
            DrainStatus.FAILED: self.dropped_failed,
            DrainStatus.CANCELLED: self.dropped_cancelled,
        }[status]
        return len(self._names(status)) + dropped

    @property
    def ok(self) -> bool:
        """True when every item completed (listed or dropped unlisted)."""
        return (
            all(i.status is DrainStatus.COMPLETED for i in self.items)
            and not self.dropped_failed
            and not self.dropped_cancelled
        )

    def describe(self) -> str:
        """One line: the counts, then each listed item that did not complete, with why."""
        head = (
            f"{self.count(DrainStatus.COMPLETED)} completed, {self.count(DrainStatus.FAILED)} failed, "
            f"{self.count(DrainStatus.CANCELLED)} cancelled"
        )
        dropped = self.dropped_completed + self.dropped_failed + self.dropped_cancelled
        if dropped:
            head += f" ({dropped} not listed: more ended between drains than are kept)"
        bad = [
            f"{i.name} {i.status.value}: {i.detail}"
            for i in self.items
            if i.status is not DrainStatus.COMPLETED
        ]
        return head + ("" if not bad else " (" + "; ".join(bad) + ")")
