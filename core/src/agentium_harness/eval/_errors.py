"""The eval package's errors: every one an :class:`~agentium_harness.AgentiumError`."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .._errors import AgentiumError

__all__ = ["CaseIssue", "EvalCaseError", "EvalError", "ReportWriteError", "UnknownGraderError"]


class EvalError(AgentiumError):
    """Root of the evaluation errors."""


@attrs.frozen(slots=True)
class CaseIssue:
    """One problem in a case file: the file, the 1-based line, the path inside the case, a message."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.path}: {self.message}"


class EvalCaseError(EvalError, ValueError):
    """A case file that cannot be used: malformed JSON, a bad field, an empty file (nothing was run).

    ``issues`` lists every problem found, each with its file, line and path.
    """

    def __init__(self, issues: Sequence[CaseIssue]) -> None:
        self.issues = tuple(issues)
        shown = "\n".join(f"  {issue}" for issue in self.issues[:50])
        more = f"\n  ... and {len(self.issues) - 50} more" if len(self.issues) > 50 else ""
        noun = "problem" if len(self.issues) == 1 else "problems"
        super().__init__(f"{len(self.issues)} {noun} in the case file; nothing was run:\n{shown}{more}")


class UnknownGraderError(EvalCaseError, LookupError):
    """A case names a grader that no installed plugin registered."""


class ReportWriteError(EvalError, OSError):
    """The report directory cannot be created or written (checked before any case runs)."""
