"""What a run's later recall rounds find the store breaking: each finding said once, all of them bounded.

After the dispatch fence a run validates what recall included again: the
document fence's look before each later model call
(:mod:`.document_run_fence`), then the commit fence. Each is a round of its
own, and a store answering every one the same way is one finding, not one
per round. :class:`RunFindings` is the run's account of them:

- a contract violation is the same as one the run met before when its key
  is, the misbehaviour and its item (:data:`~.recall_round.ViolationKey`),
  not its text: a look asks for the carried documents' answers, recall for
  every included source's, and "returned more than the N answers asked" is
  one violation whatever N (the dispatch fence's among them: a look
  validates the refs the dispatch fence validated, and meets the same
  answer), whether the run listed it or only counted it: the round meets it
  without listing or counting it again (:attr:`RunFindings.said`, given to
  the round); a note is the same when its kind is (:func:`said_as`), the
  dispatch fence's notes among them;
- the line a round counts its unlisted violations in counts only violations
  new to the run, so the run adds every round's count up;
- what is new goes to the run's list within its one bound
  (:func:`~.recall_round.add_violations`): a WARNING, and an
  ``agentium.diagnostic`` event, for each violation the run lists (16 at
  most), and one for the count of every other, however many rounds there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .recall_close import CLOSE_ABANDONED, CLOSE_FAILED, CLOSE_OVERRAN
from .recall_round import ViolationKey, add_violations
from .results import Diagnostic

if TYPE_CHECKING:
    from .progress import RunProgress

__all__ = ["NOTE", "RunFindings", "said_as", "unsaid"]

#: The diagnostic code of a recall note (an INFO record).
NOTE = "recall_note"


def said_as(code: str, message: str) -> tuple[str, str]:
    """What makes a finding the same as an earlier one's: a violation's text, a note's kind.

    A note on the session's close says what varies from look to look (the seconds the caller's
    deadline left, the store's error text, which may count or time something): by its text, the
    same close overrunning at every look was a new note each time. Its kind is how it begins: a
    close abandoned is a kind of its own, said even after an overrun was.
    """
    if code == NOTE:
        kinds = (CLOSE_OVERRAN, CLOSE_ABANDONED, CLOSE_FAILED)
        return code, next((k for k in kinds if message.startswith(k)), message)
    return code, message


def unsaid(said: Sequence[str], notes: Sequence[str]) -> tuple[str, ...]:
    """``notes`` but those of a kind (:func:`said_as`) one of ``said`` is: what a round notes after them.

    The round after a clarification opens and closes a session of its own: a close failing at both
    dispatch rounds is one note in the run, as at the looks (:class:`RunFindings`).
    """
    kinds = {said_as(NOTE, n) for n in said}
    return tuple(n for n in notes if said_as(NOTE, n) not in kinds)


class RunFindings:
    """One run's account of the contract violations and notes its later recall rounds report."""

    __slots__ = ("notes", "run", "said")

    def __init__(self, run: RunProgress) -> None:
        #: The run whose diagnostics the findings go to.
        self.run = run
        #: The keys of the violations the run met so far, listed or counted (the dispatch fence's rounds'
        #: from the start): each later round is given it (``revalidate(said=...)``), meets them again
        #: without listing or counting them, and adds its own.
        self.said: set[ViolationKey] = run.recall_said
        #: The notes said so far, by kind (:func:`said_as`); ``None`` until a round has notes: then the
        #: run's (the dispatch fence's among them) are read once, and each round's added.
        self.notes: set[tuple[str, str]] | None = None

    def report(
        self, listed: tuple[str, ...], violations: Sequence[str], notes: Sequence[str]
    ) -> tuple[str, ...]:
        """Add what a round found that the run did not report yet; the run's ``listed`` violations after it.

        ``violations`` are those of a round given :attr:`said`: what an earlier round met is not
        among them, listed nor counted. Neither the status, the uncertainty (what the model was
        told) nor the decision changes: the violations are the host's.
        """
        diagnostics = self.run.diagnostics
        said: list[str] = []
        if notes:
            reported = self.notes
            if reported is None:  # the dispatch fence's notes are the run's: their kinds are said
                reported = self.notes = {said_as(NOTE, d.message) for d in diagnostics if d.code == NOTE}
            said = [n for n in notes if said_as(NOTE, n) not in reported]
            reported.update(said_as(NOTE, n) for n in said)
        listed = add_violations(diagnostics, listed, violations)
        diagnostics.extend(Diagnostic(NOTE, n) for n in said)
        return listed
