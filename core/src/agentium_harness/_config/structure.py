"""Strict structuring of config data, with every problem reported at its ``$``-path.

The config loader (:mod:`agentium_harness._config`) structures each table
with the converter built here: no coercion between TOML types, unknown keys
refused with "did you mean", and cattrs' nested validation errors turned
into :class:`~agentium_harness._errors.ConfigIssue` entries that name the
exact key.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Mapping
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)

from .._codec import StrictTypeError, TypeWords
from .._errors import ConfigIssue
from .._plugins.spec import path_option_names, resolve_path_options
from .._text import error_text
from .source import EnvText, join_path

__all__ = ["TOML_WORDS", "field_named_in", "register_env_scalars", "structure_config", "structure_options"]

T = TypeVar("T")


_TOML_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "float",
    dict: "table",
    list: "array",
    datetime: "datetime",
    date: "date",
    time: "time",
}


def _toml_type(value: object) -> str:
    for cls, name in _TOML_TYPES.items():
        if type(value) is cls:
            return name
    return type(value).__name__


def _expected(type_: object) -> str:
    if isinstance(type_, type):
        if attrs.has(type_):
            return "table"
        if issubclass(type_, enum.Enum):
            return "one of " + ", ".join(repr(m.value) for m in type_)
        return _TOML_TYPES.get(type_, type_.__name__)
    args = [a for a in get_args(type_) if a is not type(None)]
    if get_origin(type_) is not None and len(args) == 1 and type(None) in get_args(type_):
        return _expected(args[0])
    return str(type_).replace("typing.", "")


#: TOML's words for types, for the strict rules' messages ("expected a table, got string").
#: How config errors name TOML types ("expected an integer, got string").
TOML_WORDS = TypeWords(describe=_toml_type, mapping="a table", array="an array")


# TOML's decimal spellings: what a substituted value must read as where a number is taken.
_TOML_INTEGER = re.compile(r"[+-]?(?:0|[1-9](?:_?[0-9])*)")
_TOML_FLOAT = re.compile(
    r"[+-]?(?:0|[1-9](?:_?[0-9])*)(?:\.[0-9](?:_?[0-9])*)?(?:[eE][+-]?[0-9](?:_?[0-9])*)?"
)


def _env_integer(text: str) -> int:
    if not _TOML_INTEGER.fullmatch(text):
        raise StrictTypeError(
            "expected an integer, got string: the text of its ${...} reference is not a decimal integer "
            "(such as 30)"
        )
    return int(text.replace("_", ""))


def _env_float(text: str) -> float:
    if not _TOML_FLOAT.fullmatch(text):
        raise StrictTypeError(
            "expected a number, got string: the text of its ${...} reference is not a decimal number "
            "(such as 30 or 2.5)"
        )
    return float(text.replace("_", ""))


def _env_boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise StrictTypeError(
            "expected true or false, got string: the text of its ${...} reference is neither true nor false"
        )
    return text == "true"


def register_env_scalars(conv: cattrs.Converter) -> cattrs.Converter:
    """Let ``conv`` read a substituted string (:class:`EnvText`) as an integer, number or boolean.

    Only a value that held a ``${...}`` reference is read this way, and only
    as the type the schema takes there, in TOML's spelling (``30``, ``2.5``,
    ``true``): ``op_timeout_s = "${TIMEOUT_S:-30}"`` works, while
    ``op_timeout_s = "30"`` is still refused. A substituted string where a
    string is taken becomes a plain ``str``. Returns ``conv``.
    """
    parsers: dict[type, Any] = {int: _env_integer, float: _env_float, bool: _env_boolean, str: str}
    for scalar, parse in parsers.items():
        strict = conv.get_structure_hook(scalar)

        def hook(value: Any, type_: type, *, _parse: Any = parse, _strict: Any = strict) -> Any:
            return _parse(str(value)) if isinstance(value, EnvText) else _strict(value, type_)

        conv.register_structure_hook(scalar, hook)
    return conv


def field_named_in(exc: BaseException, cls: type | None) -> str | None:
    """Best effort: the attrs field an attrs validator complained about."""
    if cls is None or not attrs.has(cls):
        return None
    names = {a.name for a in attrs.fields(cls)}
    for arg in exc.args:
        if isinstance(arg, attrs.Attribute) and arg.name in names:
            return arg.name
    words = error_text(exc, named=False).split()  # a plugin validator's exception: never raises
    if words:
        first = words[0].strip("'\"`:,")
        if first in names:
            return first
    return None


_MISSING: Any = object()


def _child(value: Any, key: object) -> Any:
    if isinstance(value, dict):
        return value.get(key, _MISSING)
    if isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
        return value[key]
    return _MISSING


def _wants_table(type_: object) -> bool:
    if isinstance(type_, type) and attrs.has(type_):
        return True
    origin = get_origin(type_)
    return isinstance(origin, type) and issubclass(origin, Mapping)


def _describe_leaf(exc: BaseException, type_: object, path: str, value: Any) -> str:
    if isinstance(exc, StrictTypeError):
        return str(exc)
    if isinstance(exc, KeyError) and value is _MISSING:
        if isinstance(type_, type) and attrs.has(type_):
            return f"missing required table [{path.removeprefix('$.')}]"
        return "missing required key"
    if _wants_table(type_) and value is not _MISSING and not isinstance(value, dict):
        return f"expected a table, got {_toml_type(value)}"
    if isinstance(exc, ValueError | TypeError):
        detail = str(exc)
        expected = _expected(type_) if type_ is not None else None
        if expected and detail:
            return f"invalid value (expected {expected}): {detail}"
        return detail or f"invalid value (expected {expected})"
    return f"{type(exc).__name__}: {exc}"


def _allowed_keys(cls: type) -> list[str]:
    return [a.name for a in attrs.fields(cls)] if attrs.has(cls) else []


def _issues_from(
    exc: BaseException, path: str, type_: object, value: Any, conv: cattrs.Converter
) -> list[ConfigIssue]:
    """Flatten a cattrs validation error tree into issues with ``$``-paths.

    ``value`` is the raw data at ``path`` (or ``_MISSING``), carried down so a
    message can say what was actually written.
    """
    issues: list[ConfigIssue] = []
    if isinstance(exc, ClassValidationError | IterableValidationError):
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            key: object = note.name if isinstance(note, AttributeValidationNote) else note.index
            issues.extend(_issues_from(sub, join_path(path, key), note.type, _child(value, key), conv))
        owner = getattr(exc, "cl", None)
        for sub in without:
            if isinstance(sub, ForbiddenExtraKeysError):
                allowed = _allowed_keys(sub.cl)
                hint = f"; allowed keys: {', '.join(allowed)}" if allowed else "; this table takes no keys"
                for key in sorted(sub.extra_fields):
                    close = difflib.get_close_matches(key, allowed, n=1)
                    guess = f"; did you mean {close[0]!r}?" if close else ""
                    issues.append(ConfigIssue(join_path(path, key), f"unknown key{guess}{hint}"))
            elif _wants_table(owner) and value is not _MISSING and not isinstance(value, dict):
                issues.append(ConfigIssue(path, f"expected a table, got {_toml_type(value)}"))
            else:
                # The class itself refused the values (an attrs validator):
                # point at the field when the message names it.
                field = field_named_in(sub, owner if isinstance(owner, type) else None)
                where = join_path(path, field) if field else path
                issues.append(ConfigIssue(where, str(sub) or type(sub).__name__))
                if isinstance(owner, type) and field and isinstance(value, dict) and field in value:
                    issues.extend(_issues_without(owner, field, path, value, conv))
        return _unique(issues)
    return [ConfigIssue(path, _describe_leaf(exc, type_, path, value))]


def _issues_without(
    owner: type, field: str, path: str, value: dict[str, Any], conv: cattrs.Converter
) -> list[ConfigIssue]:
    """The other keys of a table the class refused: checked again without the refused key.

    An attrs class's validators stop at the first field they refuse, so without this a table with
    two bad values (``max_steps = 0`` and ``op_timeout_s = 0``) reported only one. Each round
    drops one key the class named, so it ends after at most as many rounds as the table has keys.
    Only issues at a key still written are kept: one about the table as a whole, or about the
    dropped key (missing, say), comes of the dropping ("needs at least one bound") and is not a
    problem of the file.
    """
    rest = {k: v for k, v in value.items() if k != field}
    try:
        conv.structure(rest, owner)
    except (ClassValidationError, IterableValidationError) as exc:
        keys = [join_path(path, k) for k in rest]
        return [
            i
            for i in _issues_from(exc, path, owner, rest, conv)
            if any(i.path == k or i.path.startswith((k + ".", k + "[")) for k in keys)
        ]
    except Exception:  # a class's own __init__ failed outside cattrs' net: the first issue says enough
        return []
    return []


def _unique(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    seen: set[tuple[str, str]] = set()
    kept: list[ConfigIssue] = []
    for issue in issues:
        if (issue.path, issue.message) not in seen:
            seen.add((issue.path, issue.message))
            kept.append(issue)
    return kept


def structure_config(
    data: Any, cls: type[T], path: str, conv: cattrs.Converter
) -> tuple[T | None, list[ConfigIssue]]:
    try:
        return conv.structure(data, cls), []
    except (ClassValidationError, IterableValidationError) as exc:
        return None, _issues_from(exc, path, cls, data, conv)
    except Exception as exc:  # a config class's own __init__ or hook failed outside cattrs' net
        field = field_named_in(exc, cls)
        where = join_path(path, field) if field else path
        return None, [ConfigIssue(where, _describe_leaf(exc, cls, path, data))]


def structure_options(
    options: Any, cls: type, where: str, conv: cattrs.Converter, base_dir: Path | None
) -> tuple[Any, list[ConfigIssue]]:
    """``options`` structured into a plugin's config class ``cls``, relative paths resolved; or the issues.

    Runs the class's own code (validators, ``__init__``): the loader calls it
    bounded, in a daemon thread (:func:`~agentium_harness._plugins.deadline.call_with_deadline`).
    """
    structured, issues = structure_config(options, cls, where, conv)
    if issues or base_dir is None:
        return structured, issues
    try:
        return resolve_path_options(structured, base_dir), []
    # The config class refused the resolved path. Any exception: a validator that looks at the
    # file (os.stat: FileNotFoundError) raised past load_config, a traceback from agentium check.
    except Exception as exc:
        marked = path_option_names(cls)
        # Only the path options changed: with one of them, the refusal is about it.
        field = field_named_in(exc, cls) or (marked[0] if len(marked) == 1 else None)
        where = join_path(where, field) if field else where
        return None, [ConfigIssue(where, error_text(exc, named=False) or type(exc).__name__)]
