"""Values ``${VAR}`` references put in a config, and hiding them from error text (docs/config.md).

:func:`~agentium_harness._config.source.substitute_env` returns every string
that held a reference as :class:`EnvText`, which records where in it each
value from the environment stands (:attr:`EnvText.spans`). A message that
repeats such a string (a validator's ``got '...'``, a factory's or an
adapter's error naming a DSN or a path) has exactly those parts replaced by
:data:`HIDDEN`; the text the file wrote around them stays.

A value of fewer than :data:`SHORTEST_HIDDEN` characters, or a switch word
(``true``, ``off``, ...), is not hidden where it stands alone: hiding every
``1`` or ``on`` of a message labelled ordinary words and numbers as secrets
and kept no secret. Inside the whole string it was substituted into
(``postgresql://u:${PGPASS}@h/db``) it is hidden whatever its length.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import quote, quote_plus

from .._errors import ConfigIssue

__all__ = [
    "HIDDEN",
    "SHORTEST_HIDDEN",
    "EnvText",
    "env_texts",
    "hide_env_text",
    "hide_env_values",
]

#: What a hidden value is replaced with.
HIDDEN: Final = "<a value from the environment, not shown>"

#: Fewest characters a value from the environment has for it to be hidden where it stands alone.
SHORTEST_HIDDEN: Final = 4

#: Values never hidden where they stand alone, whatever their length (any case): a flag's spelling.
_SWITCHES: Final = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null"})


class EnvText(str):
    """A string value that held a ``${...}`` reference, after substitution.

    Where the schema takes a number or a boolean, such a value is read as one
    (``op_timeout_s = "${TIMEOUT_S:-30}"``), parsed strictly as that type's
    TOML spelling; a string written without a reference stays a string, and
    is refused there as before. Substitution never makes a table or an array.

    ``spans`` are the ``(start, end)`` offsets of each value the environment
    supplied, in order (a default written in the file is not one: the file
    already shows it).
    """

    spans: tuple[tuple[int, int], ...]

    def __new__(cls, text: str, spans: Iterable[tuple[int, int]] = ()) -> EnvText:
        """``text`` with the offsets of the values from the environment in it."""
        made = super().__new__(cls, text)
        made.spans = tuple((start, end) for start, end in spans if end > start)
        return made

    def pieces(self) -> list[tuple[str, bool]]:
        """The text in order, each part with whether the environment supplied it."""
        parts: list[tuple[str, bool]] = []
        at = 0
        for start, end in self.spans:
            parts.extend([(self[at:start], False), (self[start:end], True)])
            at = end
        parts.append((self[at:], False))
        return [(text, secret) for text, secret in parts if text]

    def values(self) -> list[str]:
        """The values the environment supplied, in order."""
        return [self[start:end] for start, end in self.spans]


def env_texts(data: Any) -> list[EnvText]:
    """Every string in ``data`` (tables, arrays) holding a value from the environment, longest first."""
    found: dict[tuple[str, tuple[tuple[int, int], ...]], EnvText] = {}
    stack = [data]
    while stack:  # no recursion: the loader caps nesting, a host's data may not be capped
        value = stack.pop()
        if isinstance(value, EnvText):
            if value.spans:  # the same text with other parts from the environment is another
                found.setdefault((str(value), value.spans), value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return sorted(found.values(), key=len, reverse=True)


def _too_short(value: str) -> bool:
    text = value.strip()
    return len(text) < SHORTEST_HIDDEN or text.lower() in _SWITCHES


def _repr_inner(quote_char: str) -> Callable[[str], str]:
    """How ``repr`` writes a part of a string between the quotes it chose for the whole."""
    if quote_char == "'":
        # Holding both quotes, repr quotes with ' and escapes it: the same escapes as the whole's.
        return lambda part: repr(part + "'\"")[1:-4]
    return lambda part: repr(part + "'")[1:-2]  # the whole holds ' and no ": quoted with ", ' unescaped


def _encodings(text: str) -> list[tuple[Callable[[str], str], str, str]]:
    """How a message may write ``text``: (escape of each part, opening quote, closing quote).

    Each escape works character by character, so the whole's form is its parts' forms joined.
    """
    quote_char = '"' if "'" in text and '"' not in text else "'"
    escapes: list[tuple[Callable[[str], str], str, str]] = [
        (lambda part: part, "", ""),
        (_repr_inner(quote_char), quote_char, quote_char),
        (lambda part: json.dumps(part, ensure_ascii=False)[1:-1], '"', '"'),
        (lambda part: json.dumps(part)[1:-1], '"', '"'),
        # A password with '@' or '/' is written %40, %2F in the URL a client library names.
        (lambda part: quote(part, safe=""), "", ""),
        (quote, "", ""),
        (quote_plus, "", ""),
        # Some client libraries write the hex digits in lower case (%2f): the same bytes.
        (lambda part: _lower_hex(quote(part, safe="")), "", ""),
        (lambda part: _lower_hex(quote_plus(part)), "", ""),
    ]
    return escapes


_HEX_ESCAPE: Final = re.compile(r"%[0-9A-F]{2}")


def _lower_hex(text: str) -> str:
    return _HEX_ESCAPE.sub(lambda m: m.group(0).lower(), text)


_NUMBER: Final = re.compile(r"[+-]?[0-9][0-9_]*(?:\.[0-9_]+)?(?:[eE][+-]?[0-9_]+)?")


def _number_forms(text: str) -> set[str]:
    """How a check may print ``text`` read as a number (``99999999999``, ``1e+308``)."""
    if not _NUMBER.fullmatch(text):
        return set()
    plain = text.replace("_", "")
    try:
        number = float(plain)
        return {repr(number), str(int(plain))} if plain.lstrip("+-").isdigit() else {repr(number)}
    except (ValueError, OverflowError):  # past the digit limit: only the text as written
        return set()


def _bare(forms: Iterable[str]) -> re.Pattern[str]:
    ordered = sorted({f for f in forms if f}, key=len, reverse=True)
    numbers = "|".join(re.escape(f) for f in ordered if _NUMBER.fullmatch(f))
    words = "|".join(re.escape(f) for f in ordered if not _NUMBER.fullmatch(f))
    # Not inside a longer word or number (1207 in 11207). A number's full stop joins it to digits
    # (1207.5, 3.1207), unless it ends the sentence ("invalid key: <value>."); a word's is a
    # boundary like any other: a secret name in "<value>.pem" or "db.<value>" stands there whole.
    alternatives = [rf"(?<![\w.])(?:{numbers})(?![\w]|\.\w)"] if numbers else []
    alternatives += [rf"(?<!\w)(?:{words})(?!\w)"] if words else []
    return re.compile("|".join(alternatives) or "(?!)")


def _spans_of(text: str, value: EnvText, *, bare: bool) -> list[tuple[int, int]]:
    """Where in ``text`` parts of ``value`` the environment supplied are written.

    Inside a written form of the whole string (quoted, escaped, or with ``bare`` as it is),
    exactly its values' parts; then each value alone, in the same forms. A string or value
    too short (module docstring) is not looked for.
    """
    found: list[tuple[int, int]] = []
    pieces = value.pieces()
    alone = _alone_forms(value.values())
    seen: set[str] = set()
    for escape, opening, closing in _encodings(value):
        try:
            parts = [(escape(part), secret) for part, secret in pieces]
            singles = [escape(v) for v in alone]
        except UnicodeEncodeError:  # a lone surrogate: no URL can be made of it
            continue
        whole = "".join(part for part, _ in parts)
        form = opening + whole + closing
        if form in seen or _too_short(value):
            continue
        seen.add(form)
        for match in _written(text, form, as_is=form == value, bare=bare):
            if len(parts) == 1:  # all of it from the environment: hidden with its quotes
                found.append(match.span())
                continue
            at = match.start() + len(opening)
            for part, secret in parts:
                if secret:
                    found.append((at, at + len(part)))
                at += len(part)
        for single, plain in zip(singles, alone, strict=True):
            quoted = opening + single + closing
            found.extend(m.span() for m in _written(text, quoted, as_is=quoted == plain, bare=bare))
    if bare and "…" in text:
        found += _cut_spans(text, value, alone)
    if bare and len(pieces) == 1 and pieces[0][1] and not _too_short(value):
        # The value is the whole string: a check may print the number it was read as.
        numbers = _number_forms(value.strip())
        if numbers:
            found.extend(m.span() for m in _bare(numbers).finditer(text))
    return found


#: What a message cut short ends with where it was cut: shorten()'s "…", cut_text()'s " … [n bytes, cut]".
_CUT: Final = re.compile(" ?…")


def _cut_spans(text: str, value: EnvText, alone: list[str]) -> list[tuple[int, int]]:
    """Where a message cut short in the middle of ``value`` (or of a value ``alone``) shows its start.

    The whole string's start before the cut has its parts from the environment hidden, as the whole
    is; a value alone's start all of it. A start shorter than :data:`SHORTEST_HIDDEN` is not looked
    for (a word before any "…" would be taken for one).
    """
    found: list[tuple[int, int]] = []
    candidates = [(str(value), value.spans)] if not _too_short(value) else []
    candidates += [(form, ((0, len(form)),)) for form in alone]
    for cut in _CUT.finditer(text):
        end = cut.start()
        for written, spans in candidates:
            # The longest start of it that ends at the cut and starts a word (not cut out of one).
            for length in range(min(len(written) - 1, end), SHORTEST_HIDDEN - 1, -1):
                start = end - length
                if text[end - 1] != written[length - 1] or (start and text[start - 1].isalnum()):
                    continue
                if text.startswith(written[:length], start):
                    found += [(start + a, start + min(b, length)) for a, b in spans if a < length]
                    break
    return found


def _alone_forms(values: Iterable[str]) -> list[str]:
    """What to look for of each value alone: itself, and as a path is written; none too short."""
    forms: list[str] = []
    for value in values:
        if _too_short(value):
            continue
        for form in (value, *_path_forms(value)):
            if form not in forms and not _too_short(form):
                forms.append(form)
    return forms


def _path_forms(value: str) -> list[str]:
    """How an adapter may write a path-like ``value``, and its folder (``a/b`` of ``a/b/c.db``).

    It names the folder alone ("the folder /srv/<value> of ... does not exist"); and the path it
    names is joined to the config's folder, or resolved, as pathlib writes it: no ``.`` or empty
    parts (``./a//b`` is ``a/b``; ``a/`` is ``a``), and nothing left of a leading ``..`` or ``~``.
    """
    if "/" not in value:
        return []
    # A folder given with its final slash: a file name joined to it stands after that slash.
    forms = [value.rstrip("/"), value.rstrip("/").rpartition("/")[0]]
    parts = [part for part in value.split("/") if part not in ("", ".")]
    while parts and parts[0] in ("..", "~"):
        parts.pop(0)
    # Only when that changed more than a leading slash: /home/ana's "home" is no word to hide.
    if parts and "/".join(parts) != value.strip("/"):
        forms += ["/".join(parts), "/".join(parts[:-1])]
    return [form for form in forms if form.strip("/")]


def _written(text: str, form: str, *, as_is: bool, bare: bool) -> Iterable[re.Match[str]]:
    """Where ``form`` is in ``text``: anywhere when quoted or escaped; as written, only ``bare``."""
    if not as_is:
        return re.finditer(re.escape(form), text)
    if not bare:
        return ()
    return _bare({form, form.strip()}).finditer(text)


def _hidden(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each of ``spans`` (overlapping ones merged) replaced by :data:`HIDDEN`."""
    if not spans:
        return text
    out: list[str] = []
    at = 0
    end = -1
    for start, stop in sorted(spans):
        if start < end:  # overlaps the previous one: widen it
            end = max(end, stop)
            continue
        if end >= 0:
            out.append(HIDDEN)
            at = end
        out.append(text[at:start])
        end = stop
    out.append(HIDDEN)
    out.append(text[end:])
    return "".join(out)


def hide_env_text(text: str, data: Any) -> str:
    """``text`` with every value a ``${VAR}`` reference put in ``data`` replaced, quoted or bare.

    For a message a plugin or an adapter wrote about the options in ``data`` (its factory's
    error, a health check's, an operation's): it may repeat any of them, as it likes, and a value
    from the environment may be a secret.
    """
    spans = [span for value in env_texts(data) for span in _spans_of(text, value, bare=True)]
    return _hidden(text, spans)


def hide_env_values(issues: list[ConfigIssue], data: Any) -> list[ConfigIssue]:
    """``issues`` with every value that came from the environment replaced (it may be a secret).

    A validator's message names the value it refused (``got 'x'``); a value a
    variable supplied is not repeated, wherever the check that refused it ran.
    Quoted or escaped, it is hidden in every message; in the message about its
    own key it is hidden unquoted too: a resolved path option
    (``'/etc/app/<value>'``) or the number it was read as (``got 99999``).
    """
    values = env_texts(data)
    if not values:
        return issues
    at = _env_paths(data)
    out: list[ConfigIssue] = []
    for issue in issues:
        own = at.get(issue.path)
        spans = [span for value in values for span in _spans_of(issue.message, value, bare=_same(value, own))]
        message = _hidden(issue.message, spans)
        out.append(issue if message == issue.message else ConfigIssue(issue.path, message))
    return out


def _same(value: EnvText, other: EnvText | None) -> bool:
    return other is not None and value == other and value.spans == other.spans


def _env_paths(data: Any, path: str = "$") -> dict[str, EnvText]:
    """The ``$``-path of every value a ``${VAR}`` reference put in ``data`` (depth bounded by the cap)."""
    from .source import join_path  # source imports this module

    if isinstance(data, EnvText):
        return {path: data} if data.spans else {}
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    found: dict[str, EnvText] = {}
    for key, value in items:
        found.update(_env_paths(value, join_path(path, key)))
    return found
