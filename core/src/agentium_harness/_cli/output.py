"""What every ``agentium`` subcommand shares: exit statuses, JSON form, parser, CONFIG, text input."""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, Final, TextIO

import attrs

from .._config import load_config
from .._config.load import ResolvedConfig
from .._config.runtime import hide_config_env
from .._config.source import find_config
from .._engine.results import RunStatus
from .._errors import InvalidArgumentError
from .._plugins.registry import BUILTIN_DISTRIBUTION
from .._text import error_text
from .._validators import lone_surrogate_at

__all__ = [
    "NEVER_WRITTEN",
    "reading_only",
    "refuse_missing",
    "unless_missing",
    "shown",
    "shown_lines",
    "EXIT_NEEDS_CLARIFICATION",
    "EXIT_NOT_ACCEPTED",
    "EXIT_OK",
    "EXIT_STEP_LIMIT",
    "EXIT_STOPPED",
    "EXIT_USAGE",
    "MAX_STDIN_BYTES",
    "CommandParser",
    "add_config_argument",
    "hide_env",
    "load_hiding",
    "complete",
    "discover_config",
    "json_error",
    "RUN_EXIT_STATUS",
    "plain_help",
    "print_json",
    "text_argument",
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
#: ``agentium run``: the model was still calling tools at ``max_steps``, or the turn reached its
#: message bound (status ``step_limit``); the turn was committed as it stood.
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


#: A lone surrogate: how Python holds a byte of a file name (or argument) that is not UTF-8.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def print_json(data: Any, out: TextIO | None = None) -> None:
    r"""``data`` as indented JSON, keys sorted, to ``out`` (stdout): every command's ``--json`` form.

    A lone surrogate (a file name's byte that is not UTF-8) is written as its JSON escape
    (``\udcff``): written as it is, a stdout that encodes strictly (a UTF-8 locale other than
    ``C.UTF-8``) raised ``UnicodeEncodeError``. JSON can only hold one inside a string, so the
    escape reads back as the same text. On a stream whose encoding lacks a character of the text
    (ASCII, Latin-1) every character past ASCII is written as its JSON escape.
    """
    stream = out or sys.stdout
    text = _SURROGATE.sub(
        lambda m: f"\\u{ord(m.group()):04x}", json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
    )
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        # A stream that cannot write a character (an ASCII or Latin-1 stdout) would write it as
        # its backslashreplace, '\xe9': no JSON escape. Every one is written as JSON's instead.
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=True)
    stream.write(text + "\n")


def json_error(exc: BaseException, hide: Callable[[str], str] = str) -> dict[str, str]:
    """The JSON error form of ``--json``: ``error`` (the message stderr shows) and ``error_type``.

    A command that fails after its arguments were parsed prints this on stdout with ``--json``,
    so a script always has a JSON document to read; ``agentium run`` adds the fields to the
    interrupted ``RunResult`` it prints. The message is as the error gives it (stderr escapes it),
    passed through ``hide`` (the values ``${VAR}`` references supplied, for a command that read a config).
    """
    return {"error": hide(error_text(exc, named=False)), "error_type": type(exc).__name__}


def load_hiding(args: argparse.Namespace) -> ResolvedConfig:
    """The config ``args.config`` names; ``args.hide_env`` hides what its ``${VAR}`` references supplied.

    For every command that builds adapters from a config: the error it ends with (which main()
    reports through ``args.hide_env``, on stderr and with ``--json``) may quote an adapter's
    error, and that any option the adapter was given (a SQLite path, a DSN's password).
    """
    resolved = load_config(args.config)
    args.hide_env = partial(hide_config_env, resolved=resolved)
    return resolved


def hide_env(args: argparse.Namespace) -> Callable[[str], str]:
    """What hides a command's values from the environment (:func:`load_hiding`); ``str`` before it ran."""
    hide: Callable[[str], str] | None = getattr(args, "hide_env", None)
    return hide or str


# ------------------------------------------------------------------ stored text

#: What a terminal acts on instead of showing: C0 and C1 controls (ESC starts a colour, a cursor
#: move or a screen clear; a newline starts what reads as another entry), line and paragraph
#: separators, and the bidirectional overrides that reorder what is displayed.
#: Lone surrogates too (a file name's byte that is not UTF-8): a strict stdout cannot write one.
_UNSHOWABLE: Final = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


#: The same, but a newline stays one: for a message that is several lines by design.
_UNSHOWABLE_IN_LINES: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def shown_lines(text: str) -> str:
    """``text`` with what :func:`shown` escapes escaped, except newlines: for an error's message.

    An adapter's error can quote what a remote server said; its escape sequences must not reach
    the operator's terminal. A config error lists one issue per line, so lines stay lines.
    """
    return _UNSHOWABLE_IN_LINES.sub(lambda m: repr(m.group())[1:-1], text)


def shown(text: str) -> str:
    r"""``text`` for one line of human output: every character a terminal would act on as its escape.

    For text a command prints but did not write itself (a stored fact, a recalled source, a
    verifier's reason): ``\x1b``, ``\n``, ``\u202e`` instead of a colour change, a forged line
    or reversed text. ``--json`` output keeps the text as it is.
    """
    return _UNSHOWABLE.sub(lambda m: repr(m.group())[1:-1], text)


# ------------------------------------------------------------------ the parser


class CommandParser(argparse.ArgumentParser):
    """A parser whose subcommands take options between their positional arguments.

    CONFIG is optional (the file may be found instead), so in ``run CONFIG
    --tenant T ... TEXT`` plain argparse would give CONFIG's place to the
    first word and refuse TEXT; a leaf command parses intermixed instead,
    collecting every positional first. Groups with subcommands (and a plugin
    command argparse cannot parse that way) parse as usual.
    """

    _intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._intermixing or self._subparsers is not None:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        except TypeError:  # REMAINDER or a positional in an exclusive group: argparse cannot intermix
            return super().parse_known_args(args, namespace)
        finally:
            self._intermixing = False


def complete(parser: argparse.ArgumentParser) -> None:
    """Print the completions a shell asked for and exit, when argcomplete is installed.

    Without it (it is the optional ``completion`` extra) the command completes nothing and runs
    as usual, which the shell's completion call ignores.
    """
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


# ------------------------------------------------------------------ help texts

#: reST roles (``:class:`~a.b.C```, ``:func:`name <target>```) and inline literals, as docstrings write them.
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(?:~?([^`<]*?)\s*<[^`>]*>|~?([^`]*))`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str) -> str:
    """``text`` without reST markup: help is read in a terminal, where markup is noise.

    ``:class:`~a.b.Name``` becomes ``Name`` (the last dotted part when ``~`` says so), a role with
    a title (``:func:`title <target>```) its title, and a double-backquoted literal its text.
    """

    def role(match: re.Match[str]) -> str:
        titled, target = match.group(1), match.group(2)
        if titled is not None:
            return titled
        return target.rsplit(".", 1)[-1] if match.group(0).split("`", 1)[1].startswith("~") else target

    return _LITERAL.sub(r"\1", _ROLE.sub(role, text))


def plain_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Strip reST markup from every description, epilog and help text of ``parser`` and its subcommands.

    Descriptions come from the commands' docstrings, written in reST for the API docs; a plugin's
    command gets the same treatment. Returns ``parser``.
    """
    for text_field in ("description", "epilog"):
        value = getattr(parser, text_field)
        if isinstance(value, str):
            setattr(parser, text_field, plain_text(value))
    for action in parser._actions:
        if isinstance(action.help, str):
            action.help = plain_text(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:  # the one-line help in the parent's command list
                if isinstance(choice.help, str):
                    choice.help = plain_text(choice.help)
            for sub in dict.fromkeys(action.choices.values()):
                plain_help(sub)
    return parser


# ------------------------------------------------------------------- config file


def add_config_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """Declare the optional ``CONFIG`` argument: without it the command finds the file itself.

    ``$AGENTIUM_CONFIG`` first, then ``agentium.toml`` in the working directory, as
    :func:`discover_config` does before the command runs. ``what`` adds to the help text.
    """
    parser.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG",
        help=f"the TOML config file{what} (default: the file $AGENTIUM_CONFIG names, else ./agentium.toml)",
    )
    parser.set_defaults(discover_config=True)


def discover_config(args: argparse.Namespace) -> None:
    """Fill in ``args.config`` for a command declared with :func:`add_config_argument`.

    :raises ConfigError: no CONFIG was given and none was found (the message says what to do).
    """
    if getattr(args, "discover_config", False):
        args.config = str(find_config(args.config))


# --------------------------------------------------------------- text arguments

#: Most text a command reads from standard input for a ``-`` argument (16 MiB).
MAX_STDIN_BYTES: Final = 16 * 1024 * 1024


def text_argument(value: str, what: str, outcome: str = "nothing was done") -> str:
    """The text a command was given: ``value``, or standard input when ``value`` is ``-``.

    Either way it must be valid UTF-8 (Python decodes argv bytes that are not into lone
    surrogates); standard input is read up to :data:`MAX_STDIN_BYTES`. ``what`` names the
    argument in the error (``"the TEXT argument"``), ``outcome`` ends it (``"nothing was run"``).

    :raises InvalidArgumentError: too large, or not UTF-8; nothing was done.
    """
    if value == "-":
        data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
        if len(data) > MAX_STDIN_BYTES:
            raise InvalidArgumentError(
                f"the input on standard input (for {what}) is larger than {MAX_STDIN_BYTES} bytes; {outcome}"
            )
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"the input on standard input (for {what}) is not valid UTF-8 (byte {exc.start}); "
                f"re-encode it as UTF-8. {outcome.capitalize()}"
            ) from None
    at = lone_surrogate_at(value)
    if at is not None:
        raise InvalidArgumentError(
            f"{what} is not valid UTF-8 (a bad byte at character {at}); re-encode it as UTF-8. "
            f"{outcome.capitalize()}"
        )
    return value


def reading_only(resolved: ResolvedConfig) -> ResolvedConfig:
    """``resolved`` for a command that only reads: a database file that does not exist is not created.

    The built-in SQLite adapters create their file on first use, so an
    inspect, a list, a search, a dry run or a status pointed at a mistyped
    path used to leave an empty database there. A component whose file does
    not exist reads as what it is, empty: it is built as the built-in
    in-memory adapter of its kind instead, which holds nothing and writes no
    file.
    """
    changes: dict[str, Any] = {}
    for section in _missing_sections(resolved):
        component = resolved.components()[section]
        empty = resolved.registry.adapter(component.kind, "memory")
        changes[section] = attrs.evolve(
            component, plugin="memory", spec=empty.spec, options=empty.spec.config_class()
        )
    return attrs.evolve(resolved, **changes) if changes else resolved


def _missing_sections(resolved: ResolvedConfig) -> dict[str, str]:
    """Each section whose store is a built-in SQLite database file that does not exist, with its path."""
    missing: dict[str, str] = {}
    for section, component in resolved.components().items():
        path = getattr(component.options, "path", None)
        if (
            component.distribution == BUILTIN_DISTRIBUTION
            and component.plugin == "sqlite"
            and isinstance(path, str | os.PathLike)
            and str(path) != ":memory:"
            and not os.path.exists(path)
        ):
            missing[section] = os.fspath(path)
    return missing


#: What a refusal of a missing database adds (:func:`refuse_missing`'s ``hint``) when the command
#: could go on with a store that was never written to: how to tell it so.
NEVER_WRITTEN: Final = (
    " (a store never written to has no file yet: if so, create an empty file at that path"
    " and run the command again)"
)


def refuse_missing(
    resolved: ResolvedConfig,
    section: str | Sequence[str],
    outcome: str,
    hint: str = "",
    *,
    created_with: str | None = None,
) -> None:
    """Refuse a command that must act on what a section's store holds when its database does not exist.

    The built-in SQLite adapters create their file on first use, so ``agentium erase`` pointed
    at a mistyped path created a database there and saved a tombstone in it saying nothing was
    there, while the data it was meant to erase stayed where it was; ``retention apply`` with a
    mistyped archive path created an empty archive and marked groups erased in the session store
    while the real archive kept them. ``section`` is one section or several (the first missing
    one is named). ``outcome`` ends the message (``"nothing was erased"``), ``hint`` follows it.
    A path holding something that is no SQLite database (:func:`_not_a_database`) is refused too.
    Checked before anything is built.

    ``created_with`` names the section whose store the command writes and may create (``recall``
    for ``recall add``): a missing database that is that store's too (one file for both) is not
    refused, since the command creates it, and no erasure can be on record in it for data that is
    not there yet; a mistyped path would put the data where the fence looked.

    :raises InvalidArgumentError: naming the missing database and every section configured
        with it, or the path that is no database; nothing was created or written.
    """
    absent = _missing_sections(resolved)
    created = absent.get(created_with) if created_with is not None else None
    missing = {
        name: path for name, path in absent.items() if created is None or not _same_path(path, created)
    }
    wanted = (section,) if isinstance(section, str) else tuple(section)
    for name in wanted:
        why = _not_a_database(resolved, name) if name not in absent else None
        if why is not None:
            raise InvalidArgumentError(
                f"{shown(why[0])} ([{name}]) is not a SQLite database ({why[1]}): check the path in "
                f"the config; {outcome}, and nothing was written"
            )
    path = next((missing[name] for name in wanted if name in missing), None)
    if path is None:
        return
    sections = ", ".join(f"[{name}]" for name, other in missing.items() if other == path)
    raise InvalidArgumentError(
        f"no database at {shown(path)} ({sections}): check the path in the config; {outcome}, "
        f"and no database was created{hint}"
    )


def _same_path(a: str, b: str) -> bool:
    """Whether two paths (neither of which exists) name the same file once opened.

    Compared with their links resolved: SQLite opens a link that leads nowhere yet by creating
    the file it names, so a session store's path that is a link to the written store's (or the
    other way round) is one file for both, as one spelling is.
    """
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


#: How every SQLite database file begins (an empty file is one too: SQLite makes it a database).
_SQLITE_HEADER: Final = b"SQLite format 3\x00"


def _not_a_database(resolved: ResolvedConfig, section: str) -> tuple[str, str] | None:
    """``(path, why)`` when ``section``'s built-in SQLite store has something at its path that is no database.

    A folder, a device or a file of other text there fails only once the store is first used:
    for an erasure that is after it recorded itself pending in the session store, so the scope was
    left refused (until ``erase --resume``) over a path typed wrong. Read without waiting (a FIFO).
    """
    component = resolved.components().get(section)
    path = getattr(component.options, "path", None) if component is not None else None
    if (
        component is None
        or component.distribution != BUILTIN_DISTRIBUTION
        or component.plugin != "sqlite"
        or not isinstance(path, str | os.PathLike)
        or str(path) == ":memory:"
    ):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return os.fspath(path), f"cannot be opened: {exc.strerror or exc}"
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return os.fspath(path), "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        head = os.read(fd, len(_SQLITE_HEADER))
    except OSError as exc:
        return os.fspath(path), f"cannot be read: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None if head in (b"", _SQLITE_HEADER) else (os.fspath(path), "its first bytes are not SQLite's")


def unless_missing(resolved: ResolvedConfig, section: str, refuse: Sequence[str] = ()) -> ResolvedConfig:
    """``resolved`` for a command whose work starts from what ``section``'s store holds.

    When that store is a built-in SQLite database that does not exist, it holds
    nothing to work on (no fact to forget, no session to reconcile or trim, no
    archived group to index), and the command is answered as
    :func:`reading_only` answers it: nothing there, and no database created.
    A ``memory forget`` on a mistyped path said "nothing was changed" after
    creating an empty database there. Otherwise ``resolved`` is returned as it is,
    unless a store of ``refuse`` (one the work then reads or changes: the archive a
    ``session reconcile`` compares with) has no database: that is refused
    (:func:`refuse_missing`), since an empty one would be created and taken for the truth.
    """
    readable = reading_only(resolved)
    if getattr(readable, section) is not getattr(resolved, section):
        return readable
    refuse_missing(resolved, refuse, "nothing was changed")
    return resolved
