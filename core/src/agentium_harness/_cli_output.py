"""What every ``agentium`` subcommand shares: its exit statuses and its JSON output form."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

__all__ = ["EXIT_OK", "EXIT_USAGE", "print_json"]

#: Success.
EXIT_OK = 0
#: A problem the user can fix: bad arguments, an invalid config, a plugin error.
EXIT_USAGE = 2


def print_json(data: Any, out: TextIO | None = None) -> None:
    """``data`` as indented JSON, keys sorted, to ``out`` (stdout): every command's ``--json`` form."""
    (out or sys.stdout).write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
