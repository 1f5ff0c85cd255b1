"""Subcommands that plugins add to the ``agentium`` command (``agentium <name> ...``).

Plugins register them through the ``agentium_register_commands`` hook with
``register(CliCommand(...))``; for example ``agentium-postgres`` adds
``agentium postgres migrate CONFIG``. The command line loads plugins only
when the first word is not one of the core's own commands, so the core's
commands never pay for importing plugins, and a plugin can never replace
one of them: a name the core uses is refused at registration.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Final

import attrs

from .._errors import InvalidArgumentError
from .deadline import check_timeout

__all__ = [
    "COMMAND_HOOK",
    "CORE_COMMANDS",
    "DEFAULT_COMMAND_TIMEOUT_S",
    "CliCommand",
    "CommandTable",
    "RegisterCommand",
]

#: The registration hook for plugin subcommands.
COMMAND_HOOK: Final = "agentium_register_commands"

#: The core's own subcommands; a plugin may not register these names.
CORE_COMMANDS: Final = frozenset(
    {"plugins", "check", "demo", "run", "session", "recall", "memory", "verify", "eval", "erase", "retention"}
)

#: How long a plugin command's ``run`` may take unless its ``CliCommand`` says otherwise (ten minutes).
DEFAULT_COMMAND_TIMEOUT_S: Final = 600.0

#: What a command name may look like: typed on the command line, so short, lower case, no quoting.
_NAME: Final = re.compile(r"[a-z][a-z0-9-]{0,31}")


@attrs.frozen(slots=True)
class CliCommand:
    """A subcommand of ``agentium``, registered by a plugin.

    - ``name``: the word after ``agentium`` (lower case letters, digits and
      ``-``, at most 32 characters; not one of the core's commands).
    - ``help``: one line for ``agentium --help``.
    - ``configure``: called with the subcommand's ``argparse.ArgumentParser``
      to declare its arguments (it may add nested subparsers); it must do no
      I/O.
    - ``run``: called with the parsed ``argparse.Namespace``; returns the exit
      status. An :class:`~agentium_harness.AgentiumError` it raises is printed
      as ``agentium <name>: <message>`` with exit status 2, as for the core's
      commands.
    - ``description``: the longer text of ``agentium <name> --help``
      (defaults to ``help``).
    - ``timeout_s``: how long ``run`` may take, in seconds (more than 0, at
      most a day; default 600, :data:`DEFAULT_COMMAND_TIMEOUT_S`). The command
      line enforces it whatever ``run`` does: ``run`` is called in a daemon
      thread, and past the bound the command stops waiting for it, reports
      ``agentium <name>: ... did not return within ...`` and exits with
      status 2 (the abandoned thread ends with the process). A command that
      legitimately runs longer (a large migration) declares a larger bound.
      Ctrl-C reaches the command line, never ``run``'s thread: ``run`` is
      abandoned and the command exits with status 130.
    """

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S


RegisterCommand = Callable[[CliCommand], None]


class CommandTable:
    """The registered commands by name; a name registered twice is refused, the first kept."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[CliCommand, str]] = {}

    def problems_for(self, command: object, distribution: str) -> str | None:
        """Why ``command`` cannot be registered, or ``None``."""
        if not isinstance(command, CliCommand):
            return f"register() takes a CliCommand, got {type(command).__name__}"
        if not isinstance(command.name, str) or not _NAME.fullmatch(command.name):
            return (
                f"command name must be 1 to 32 characters of a-z, 0-9 and '-', starting with a letter, "
                f"got {command.name!r}"
            )
        if command.name in CORE_COMMANDS:
            return f"command {command.name!r} is one of the core's own commands and cannot be replaced"
        if not callable(command.configure) or not callable(command.run):
            return f"command {command.name!r} needs callable configure and run"
        if not isinstance(command.help, str) or not command.help.strip():
            return f"command {command.name!r} needs a help line"
        try:
            check_timeout(command.timeout_s, f"command {command.name!r}: timeout_s")
        except InvalidArgumentError as exc:
            return str(exc)
        found = self._by_name.get(command.name)
        if found is not None:
            return f"command {command.name!r} is already registered by {found[1]}"
        return None

    def add(self, command: CliCommand, distribution: str) -> None:
        """Record an accepted command."""
        self._by_name[command.name] = (command, distribution)

    def names(self) -> tuple[str, ...]:
        """Registered command names, sorted."""
        return tuple(sorted(self._by_name))

    def get(self, name: str) -> CliCommand:
        """The command named ``name``; ``KeyError`` if none."""
        return self._by_name[name][0]

    def distribution(self, name: str) -> str:
        """The distribution that registered ``name``."""
        return self._by_name[name][1]
