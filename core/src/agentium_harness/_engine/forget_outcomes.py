"""What an error leaving ``runtime.forget`` says it changed, by its stage (docs/erasure.md).

A forget erases the fact's sources first (with ``erase_sources=True``) and
forgets the fact only once they are done: an error while erasing them knows
the fact is not forgotten (by this call), one while forgetting it cannot tell.
Its :class:`ForgetProgress` carries the stage; the words are read as the
error leaves (:class:`ForgetOutcomes`), not when the call began.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from .results import CommitState
from .unexpected import Outcomes, WriteProgress

__all__ = ["FORGET_OUTCOMES", "ForgetOutcomes", "ForgetProgress", "forget_outcomes"]


class ForgetProgress(WriteProgress):
    """A forget's progress, and its stage: ``forgetting`` once its sources' erasures are done."""

    __slots__ = ("forgetting", "unwritten")

    def __init__(self) -> None:
        super().__init__()
        #: The fact's forget began: before it, the fact is known not forgotten (by this call).
        self.forgetting = False
        #: The memory manager's forget failed saying its store's write never began: not forgotten.
        self.unwritten = False


FORGET_OUTCOMES: Outcomes = {
    CommitState.NOT_COMMITTED: (
        "it failed before changing anything: the fact was not forgotten and nothing was erased "
        "(commit_state not_committed); call forget again"
    ),
    CommitState.UNKNOWN: (
        "it failed while forgetting the fact: the erasures of its sources that completed stand "
        "(erasure_status lists them) and the fact may be forgotten (commit_state unknown); "
        "memory.history shows whether it is"
    ),
    CommitState.COMMITTED: "it failed after the fact was forgotten (commit_state committed)",
}
#: What a forget says while it erases the fact's sources: it forgets the fact only once they are done.
_FORGET_SOURCES: Outcomes = {
    **FORGET_OUTCOMES,
    CommitState.UNKNOWN: (
        "it failed once it began erasing the fact's sources, before forgetting it: the fact was not "
        "forgotten, the erasures of its sources that completed stand and the one under way may be "
        "pending (erasure_status lists them; resume_erasures completes it) (commit_state unknown); "
        "call forget again"
    ),
}

#: What a forget says once its sources' erasures are done and the manager's forget failed before
#: its store's write began (its error said so, ``not_committed``): the fact is known not forgotten.
_FORGET_UNWRITTEN: Outcomes = {
    **FORGET_OUTCOMES,
    CommitState.UNKNOWN: (
        "it failed as it forgot the fact, before the store's forget began: the fact was not forgotten "
        "and the erasures of its sources that completed stand (erasure_status lists them) "
        "(commit_state unknown); call forget again"
    ),
}


def forget_outcomes(progress: WriteProgress) -> Outcomes:
    """What an error leaving a forget says, by its stage now: erasing the fact's sources, or forgetting it.

    Forgetting it, a manager's error saying its store's write never began tells the fact is not forgotten.

    A progress that does not carry the stage gets the words true at either ("may be forgotten").
    """
    if isinstance(progress, ForgetProgress) and not progress.forgetting:
        return _FORGET_SOURCES
    if isinstance(progress, ForgetProgress) and progress.unwritten:
        return _FORGET_UNWRITTEN
    return FORGET_OUTCOMES


class ForgetOutcomes(Mapping[CommitState, str]):
    """:func:`forget_outcomes` read when an error leaves the call, not when the call began."""

    def __init__(self, progress: ForgetProgress) -> None:
        self._progress = progress

    def __getitem__(self, state: CommitState) -> str:
        return forget_outcomes(self._progress)[state]

    def __iter__(self) -> Iterator[CommitState]:
        return iter(CommitState)

    def __len__(self) -> int:
        return len(CommitState)
