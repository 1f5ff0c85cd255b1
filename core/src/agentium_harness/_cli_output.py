"""What every ``agentium`` subcommand shares: its exit statuses and its JSON output form."""

from __future__ import annotations

import json
import sys
from types import MappingProxyType
from typing import Any, Final, TextIO

from ._engine.results import RunStatus

__all__ = [
    "EXIT_NEEDS_CLARIFICATION",
    "EXIT_NOT_ACCEPTED",
    "EXIT_OK",
    "EXIT_STEP_LIMIT",
    "EXIT_STOPPED",
    "EXIT_USAGE",
    "RUN_EXIT_STATUS",
    "print_json",
]

#: Success. ``agentium run``: the turn completed and was committed.
EXIT_OK: Final = 0
#: A problem the user can fix: bad arguments, an invalid config, a plugin error.
#: ``agentium run``: also a run that failed (a provider error, a deadline); the error message says
#: whether the turn was committed (``commit_state``: a tool that already ran is committed).
EXIT_USAGE: Final = 2
#: A completion was verified and not accepted (verdict ``fail`` or ``unknown``):
#: ``agentium verify``, and ``agentium run --task`` (status ``not_accepted``; the turn was committed).
EXIT_NOT_ACCEPTED: Final = 3
#: ``agentium run``: the recall policy stopped the run (status ``stopped``); nothing was committed,
#: unless tools had already run: their calls and results are, without the answer.
EXIT_STOPPED: Final = 4
#: ``agentium run``: the recall policy asks a clarification (status ``needs_clarification``) and the
#: command has no one to ask; nothing was committed.
EXIT_NEEDS_CLARIFICATION: Final = 5
#: ``agentium run``: the model was still calling tools at ``max_steps`` (status ``step_limit``);
#: the turn was committed as it stood.
EXIT_STEP_LIMIT: Final = 6

#: The exit status of ``agentium run`` for each run status: 0 only for ``completed``.
RUN_EXIT_STATUS: Final = MappingProxyType(
    {
        RunStatus.COMPLETED: EXIT_OK,
        RunStatus.NOT_ACCEPTED: EXIT_NOT_ACCEPTED,
        RunStatus.STOPPED: EXIT_STOPPED,
        RunStatus.NEEDS_CLARIFICATION: EXIT_NEEDS_CLARIFICATION,
        RunStatus.STEP_LIMIT: EXIT_STEP_LIMIT,
        # Only on an error's ``run_result``: run() raised, which the command reports as a failure.
        RunStatus.INTERRUPTED: EXIT_USAGE,
    }
)


def print_json(data: Any, out: TextIO | None = None) -> None:
    """``data`` as indented JSON, keys sorted, to ``out`` (stdout): every command's ``--json`` form."""
    (out or sys.stdout).write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
