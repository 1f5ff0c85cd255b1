"""Reading a config file: which file, the bounded read, the nesting cap, TOML, and ``${VAR}`` substitution.

The first half of phase (a) in :mod:`agentium_harness._config`: everything
that happens to the text before it is structured against the schema. Each
problem is a :class:`~agentium_harness._errors.ConfigIssue` with its path.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from .._errors import ConfigError, ConfigIssue
from .env_text import EnvText, hide_env_text, hide_env_values

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILE",
    "MAX_CONFIG_BYTES",
    "EnvText",
    "MAX_NESTING",
    "find_config",
    "join_path",
    "parse_toml",
    "read_limited",
    "read_source",
    "hide_env_text",
    "hide_env_values",
    "substitute_env",
]

#: Largest config file read, in bytes. A config is a few kilobytes; the cap
#: keeps ``agentium check /dev/zero`` or a mistyped path to a huge file from
#: reading without end.
MAX_CONFIG_BYTES = 1024 * 1024

#: Deepest nesting of tables and arrays accepted. The schema needs four
#: levels (``[recall.budget]``, option tables of tables); the cap stops a
#: small file nested hundreds of levels deep before the recursive TOML parser
#: and the checks run out of stack.
MAX_NESTING = 32


#: The environment variable naming the config file when a command or :func:`load_config` is given none.
CONFIG_ENV: Final = "AGENTIUM_CONFIG"

#: The file looked for in the working directory when no config is given and :data:`CONFIG_ENV` is unset.
DEFAULT_CONFIG_FILE: Final = "agentium.toml"


def find_config(path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> Path:
    """The config file to read: ``path`` when given, else ``$AGENTIUM_CONFIG``, else ``./agentium.toml``.

    The order peers' command lines follow (an explicit file, then the environment, then a
    well-known name in the working directory), so one deployment setting serves every command.

    :raises ConfigError: no path given and neither of the other two names a file; nothing was read.
    """
    if path is not None:
        return Path(path)
    env = os.environ if environ is None else environ
    named = env.get(CONFIG_ENV, "")
    if named:
        why = _not_a_file(named)
        if why is not None:
            raise ConfigError(
                [ConfigIssue("$", f"{CONFIG_ENV} names {named!r}, which {why}; fix or unset it")], named
            )
        return Path(named)
    if _not_a_file(DEFAULT_CONFIG_FILE) is None:
        return Path(DEFAULT_CONFIG_FILE)
    try:
        here = f"({Path.cwd()})"
    except OSError:  # removed since the command started in it
        here = "(the working directory no longer exists)"
    raise ConfigError(
        [
            ConfigIssue(
                "$",
                f"no config file given: pass its path, set {CONFIG_ENV}, or create {DEFAULT_CONFIG_FILE} "
                f"in the working directory {here}",
            )
        ]
    )


def _not_a_file(path: str) -> str | None:
    """Why ``path`` names no regular file to read (``None`` when it does).

    Not :meth:`Path.is_file`: it raises for a path too long for the system or a folder on the
    way that cannot be searched (``ENAMETOOLONG``, ``EACCES``), a traceback instead of the error.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return "is not a file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else "is not a file"


# ------------------------------------------------------------ env substitution

# ``${NAME}``, ``${NAME:-default}`` and OpenTelemetry's spelling of the same, ``${env:NAME}`` and
# ``${env:NAME:-default}``; ``$${`` is a literal ``${``; any other ``${`` is malformed.
_REFERENCE = re.compile(r"\$\$\{|\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


#: What :func:`join_path` writes as a ``\\u`` escape besides what JSON escapes (see there).
_UNSHOWN_IN_KEYS: Final = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def join_path(path: str, key: object) -> str:
    """The ``$``-path of ``key`` under ``path`` (``$.a.b``, ``$.a[0]``, ``$.a["x y"]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", text):
        return f"{path}.{text}"
    # json.dumps escapes C0 controls only: C1 controls (U+009B is a terminal's CSI), DEL, line
    # separators and bidi overrides in a key would reach the terminal raw in `agentium check`.
    quoted = _UNSHOWN_IN_KEYS.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))
    return f"{path}[{quoted}]"


class _Budget:
    """Characters that substitution may still insert, across the whole config (see :func:`substitute_env`)."""

    def __init__(self, left: int) -> None:
        self.left = left
        self.spent = False


def _substitute_text(
    text: str, env: Mapping[str, str], path: str, issues: list[ConfigIssue], budget: _Budget
) -> str:
    if "$" not in text:
        return text
    failed = substituted = False
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0

    def replace(match: re.Match[str]) -> tuple[str, bool]:
        """The text for ``match``, and whether it is a value from the environment."""
        nonlocal failed, substituted
        whole = match.group(0)
        if whole == "$${":
            return "${", False
        substituted = True
        name, default = match.group(1), match.group(2)
        if default is not None and "${" in default:
            # ${A:-${B}} is not nested substitution: it would leave the text "${B}" (and a stray "}").
            failed = True
            issues.append(
                ConfigIssue(path, "a ${NAME:-default} default cannot hold another ${...} reference")
            )
            return whole, False
        if name is None:
            failed = True
            issues.append(
                ConfigIssue(
                    path,
                    "invalid ${...} reference: write ${NAME}, ${NAME:-default} (or ${env:NAME}, "
                    "${env:NAME:-default}), or $${ for a literal ${",
                )
            )
            return whole, False
        value = env.get(name)
        from_env = True
        if value is None or (value == "" and default is not None):
            if default is None:
                failed = True
                hint = f"write ${{{name}:-default}} to give a default"
                issues.append(ConfigIssue(path, f"environment variable {name} is not set ({hint})"))
                return whole, False
            value, from_env = default, False  # written in the file: it shows it already
        budget.left -= len(value)
        if budget.left < 0:
            # A small file repeating a reference to a large variable expanded without bound (8 KB
            # of "${X}" made a 200 MB string): the bounded read means nothing without this.
            failed = True
            if not budget.spent:
                budget.spent = True
                issues.append(
                    ConfigIssue(
                        path,
                        f"the ${{...}} references of the config expand to more than {MAX_CONFIG_BYTES} "
                        "characters in all; nothing more was substituted",
                    )
                )
            return whole, False
        return value, from_env

    at = 0
    for match in _REFERENCE.finditer(text):
        out.append(text[at : match.start()])
        length += match.start() - at
        value, from_env = replace(match)
        if from_env:
            # Where each value stands in the result, so an error hides exactly it (env_text).
            spans.append((length, length + len(value)))
        out.append(value)
        length += len(value)
        at = match.end()
    out.append(text[at:])
    # On failure keep the original text, so later checks see what was written
    # rather than half-substituted text.
    if failed:
        return text
    result = "".join(out)
    return EnvText(result, spans) if substituted else result


def substitute_env(
    data: Any, environ: Mapping[str, str] | None = None, *, path: str = "$"
) -> tuple[Any, list[ConfigIssue]]:
    """Substitute ``${VAR}`` references in every string value of parsed TOML data.

    Only string values change, and only into strings: a variable's value never
    becomes a key, a table or an array, whatever characters it holds. Keys are
    left alone. ``${VAR:-default}`` uses ``default`` when ``VAR`` is unset or
    empty; ``${env:VAR}`` is the same as ``${VAR}``; ``$${`` stands for a
    literal ``${``. A value that held a reference comes back as :class:`EnvText`,
    which the config loader reads as a number or boolean where the schema takes
    one. The references of the whole config insert at most :data:`MAX_CONFIG_BYTES`
    characters. Returns the new data and one issue per unset variable or malformed
    reference (and one when that bound is passed).
    """
    env = os.environ if environ is None else environ
    issues: list[ConfigIssue] = []
    return _walk(data, path, env, issues, _Budget(MAX_CONFIG_BYTES)), issues


def _walk(value: Any, where: str, env: Mapping[str, str], issues: list[ConfigIssue], budget: _Budget) -> Any:
    # A module function, not a closure calling itself: that closure referred to itself through its
    # own cell, a cycle left to the collector (with its budget) by every config load.
    if isinstance(value, str):
        return _substitute_text(value, env, where, issues, budget)
    if isinstance(value, dict):
        return {k: _walk(v, join_path(where, k), env, issues, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, join_path(where, i), env, issues, budget) for i, v in enumerate(value)]
    return value


def _too_large(source: str | None) -> ConfigError:
    return ConfigError(
        [
            ConfigIssue(
                "$", f"config file larger than {MAX_CONFIG_BYTES} bytes ({MAX_CONFIG_BYTES // 1024} KiB)"
            )
        ],
        source,
    )


#: How long a config or case file that is a named pipe may wait for something to write into it.
PIPE_WAIT_S: Final = 10.0


def read_limited(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the file at ``path``; a named pipe waits at most :data:`PIPE_WAIT_S`.

    ``open()`` of a FIFO blocks until something opens it to write, so a config or case file
    path naming one nobody writes to hung the command for good. The file is opened without
    waiting; a FIFO then waits up to :data:`PIPE_WAIT_S` for its writer (one started just
    after the command, ``agentium check pipe & make-config > pipe``) and is read to its end,
    up to the bound, as a pipe something writes into (``agentium check <(make-config)``) is.

    :raises OSError: it cannot be read, or it is a named pipe nothing was written to in time.
    """
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | nonblocking | getattr(os, "O_CLOEXEC", 0))
    try:
        if nonblocking and stat.S_ISFIFO(os.fstat(fd).st_mode) and not _writer_came(fd):
            raise OSError(errno.ENODATA, f"a named pipe nothing was written to within {PIPE_WAIT_S:g}s")
        if nonblocking:
            os.set_blocking(fd, True)  # only the open and the wait must not block: reads do
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    finally:
        os.close(fd)


def _writer_came(fd: int) -> bool:
    """Whether the FIFO ``fd`` had data or a writer come and go within :data:`PIPE_WAIT_S`."""
    import select  # POSIX only, as FIFOs are

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    # Linux reports no POLLHUP for a FIFO no writer has opened yet: only data, or a writer that
    # opened and closed it (read then ends at once, with what it wrote), ends the wait early.
    return bool(poller.poll(PIPE_WAIT_S * 1000))


def read_source(source: str | os.PathLike[str]) -> tuple[str, str | None, Path | None]:
    """Return (text, shown source name, base directory).

    At most :data:`MAX_CONFIG_BYTES` + 1 bytes are read, so a device such as
    ``/dev/zero`` or a huge file is refused after one bounded read.
    """
    if isinstance(source, str):
        if len(source) > MAX_CONFIG_BYTES:  # characters: a cheap bound before encoding
            raise _too_large(None)
        return source, None, None
    path = Path(source)
    shown = str(path)
    try:
        data = read_limited(path, MAX_CONFIG_BYTES)
        base_dir = path.resolve().parent
    except OSError as exc:
        raise ConfigError(
            [ConfigIssue("$", f"cannot read config file: {exc.strerror or exc}")], shown
        ) from exc
    except ValueError as exc:
        # open() refuses a path no file can have (a NUL, a lone surrogate the file system
        # cannot encode) with ValueError, not OSError: the same error as a missing file.
        raise ConfigError(
            [
                ConfigIssue(
                    "$", "cannot read config file: its path holds a NUL or a character no file name can"
                )
            ],
            shown,
        ) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise _too_large(shown)
    try:
        return data.decode("utf-8"), shown, base_dir
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigIssue("$", f"config file is not UTF-8: {exc}")], shown) from exc


#: Most parts (``a.b.c`` is three) a dotted key or a table header may have before the text is parsed.
#: tomllib's time grows with the square of a key's parts (16,000 parts took 5 s; the 400,000 a 1 MiB
#: file holds, about an hour), so such a key is refused before it: a key of more than
#: :data:`MAX_NESTING` parts nests deeper than the cap anyway. Twice the cap, so a key a little past
#: it is still refused after the parse, with its path; a 1 MiB file of keys this long parses in
#: about a second, as any file of that size does.
MAX_KEY_PARTS: Final = 2 * MAX_NESTING


def _bracket_depth(text: str) -> tuple[int, int]:
    """The deepest nesting of TOML text outside strings and comments, and its line.

    A small scanner, not a parser: it only has to find runaway nesting before
    :mod:`tomllib`, which recurses once per ``[``/``{`` level, can hit Python's
    recursion limit, and takes time in the square of a dotted key's parts. Table
    headers count one or two levels, which the cap allows. A key (a line's, a
    header's, an inline table's) of more than :data:`MAX_KEY_PARTS` parts is
    reported as nesting past :data:`MAX_NESTING`, at its line.
    """
    depth = deepest = 0
    deepest_line = line = 1
    # What is open: "h" a table header, "[" an array, "{" an inline table. A key is read at the
    # start of a top-level line, in a header, and after "{" or "," in an inline table, until "=".
    opened: list[str] = []
    in_key, dots = True, 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            if not opened:
                in_key, dots = True, 0
        elif ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch in "\"'":
            triple = text.startswith(ch * 3, i)
            quote = ch * 3 if triple else ch
            j, closer = i + len(quote), len(quote)
            while j < n:
                if ch == '"' and text[j] == "\\":
                    # Basic strings have escapes; literal strings do not. A multi-line one's line-
                    # ending backslash escapes the newline, which is still a line of the file.
                    if text.startswith("\n", j + 1):
                        line += 1
                    j += 2
                    continue
                if text.startswith(quote, j):
                    # One or two quotes may end a multi-line string's text right before the three
                    # that close it ('"""say "hi""""'): it ends after the last. Left over, one would
                    # read as an opening quote, and hide the next line's key from the count.
                    while triple and closer < 5 and text.startswith(ch, j + closer):
                        closer += 1
                    break
                if text[j] == "\n":
                    if not triple:
                        # An unterminated one-line string (tomllib reports it): the newline is left
                        # to the loop, so it is counted and the next line's key is read.
                        closer = 0
                        break
                    line += 1
                j += 1
            i = j + closer
            continue
        elif ch in "[{":
            header = ch == "[" and in_key and (not opened or opened[-1] == "h")
            opened.append("h" if header else ch)
            if not header:
                in_key, dots = ch == "{", 0
            depth += 1
            if depth > deepest:
                deepest, deepest_line = depth, line
        elif ch in "]}":
            depth = max(depth - 1, 0)
            if opened and opened.pop() == "h" and not opened:
                in_key = False  # the rest of a header's line is no key
            elif ch == "}":
                in_key = False
        elif ch == "=":
            in_key = False
        elif ch == "," and opened and opened[-1] == "{":
            in_key, dots = True, 0
        elif ch == "." and in_key:
            dots += 1
            if dots >= MAX_KEY_PARTS:
                return max(deepest, MAX_NESTING + 1), line
        i += 1
    return deepest, deepest_line


def _data_depth(data: Any) -> tuple[int, str]:
    """The deepest nesting of parsed data (tables and arrays) and the path where it is, without recursion."""
    deepest, where = 0, "$"
    stack: list[tuple[Any, int, str]] = [(data, 0, "$")]
    while stack:
        value, depth, path = stack.pop()
        if depth > deepest:
            deepest, where = depth, path
        if depth > MAX_NESTING:
            break  # deep enough to refuse; no need to walk the rest
        if isinstance(value, dict):
            stack.extend((v, depth + 1, join_path(path, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, join_path(path, i)) for i, v in enumerate(value))
    return deepest, where


#: The byte order mark some editors (Notepad, PowerShell's ``Out-File``) put at the start of a UTF-8 file.
_BOM: Final = "\ufeff"


def parse_toml(text: str, source: str | None) -> dict[str, Any]:
    """``text`` parsed as TOML, within the nesting cap; one leading byte order mark is ignored.

    TOML allows no BOM, so :mod:`tomllib` reported one as "Invalid statement (line 1, column 1)"
    on a file that looks correct in every editor. One BOM at the very start only marks the
    encoding and is dropped; anywhere else (a second one included) it is still invalid TOML.

    :raises ConfigError: one issue at ``$``: invalid TOML, or nested past :data:`MAX_NESTING`.
    """
    if text.startswith(_BOM):
        text = text[len(_BOM) :]
    depth, line = _bracket_depth(text)
    if depth > MAX_NESTING:
        raise ConfigError(
            [ConfigIssue("$", f"tables and arrays nested more than {MAX_NESTING} levels deep (line {line})")],
            source,
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        hint = ""
        if source is None and "=" not in text and "\n" not in text.strip():
            hint = " (parse_config takes TOML text; pass a pathlib.Path or use load_config to read a file)"
        raise ConfigError([ConfigIssue("$", f"invalid TOML: {exc}{hint}")], source) from exc
    except ValueError as exc:  # an integer literal past Python's digit limit (4,300 by default)
        raise ConfigError([ConfigIssue("$", f"invalid TOML: {exc}")], source) from None
    # Dotted keys (a.b.c... = 1) and table headers nest without brackets.
    depth, where = _data_depth(data)
    if depth > MAX_NESTING:
        raise ConfigError(
            [ConfigIssue("$", f"tables and arrays nested more than {MAX_NESTING} levels deep (at {where})")],
            source,
        )
    return data
