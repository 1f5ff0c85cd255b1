r"""Strict, bounded JSON decoding of what the server sends: a reply body and each tool call's arguments.

The server's text is not trusted to be small, shallow or unambiguous:

- :func:`loads_strict` refuses duplicate object keys (which value a tool
  would get is then a guess), ``NaN``/``Infinity`` (not JSON, and not
  encodable canonically later), and nesting so deep the parser itself runs
  out of stack (a ``RecursionError`` becomes a refusal, never escapes);
- :func:`check_tree` walks a decoded value without recursion and refuses
  nesting past ``max_depth`` and text holding a lone surrogate (``"\ud800"``
  decodes to a ``str`` that no UTF-8 encoder accepts, so it would fail only
  after a tool had run).

Both raise :class:`JsonRefused`; the caller turns it into its typed error with
the context it knows (which tool call, which limit). Size caps are the
caller's, applied before any text reaches the parser.
"""

from __future__ import annotations

import json
import math
import re
from typing import Final

__all__ = ["JsonRefused", "check_tree", "loads_strict"]

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class JsonRefused(Exception):
    """Why a JSON text or value was refused.

    ``too_deep`` when it was its nesting; ``syntax`` the parser's message when
    the text is not JSON at all.
    """

    def __init__(self, reason: str, *, too_deep: bool = False, syntax: str | None = None) -> None:
        self.reason = reason
        self.too_deep = too_deep
        self.syntax = syntax
        super().__init__(reason)


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise JsonRefused(f"the object key {key[:40]!r} appears twice")
        result[key] = value
    return result


def _constant(name: str) -> object:
    raise JsonRefused(f"{name} is not a JSON number")


def loads_strict(text: str) -> object:
    """``text`` decoded as one JSON value; :class:`JsonRefused` for anything ambiguous or unparsable."""
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except RecursionError:
        # The C parser recurses once per level; past the interpreter's limit it
        # raises RecursionError, which is the text's fault, not a crash.
        raise JsonRefused("it is nested too deeply to parse", too_deep=True) from None
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"it is not valid JSON ({exc.msg} at position {exc.pos})", syntax=exc.msg) from None


def check_tree(value: object, max_depth: int) -> None:
    """Refuse ``value`` if its arrays/objects nest deeper than ``max_depth`` or any text has a lone surrogate.

    ``{}`` and ``[]`` are depth 1. Walks with an explicit stack, so no depth
    can make it recurse. Values that are not JSON types (from a caller that
    built the body itself) are refused too.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                raise JsonRefused("it holds text with a lone surrogate escape (not a Unicode character)")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise JsonRefused(f"it nests arrays and objects more than {max_depth} deep", too_deep=True)
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise JsonRefused(f"it has an object key that is {type(key).__name__}, not text")
                    stack.append((key, depth))
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise JsonRefused(f"{item!r} is not a JSON number")
        elif item is not None and not isinstance(item, bool | int):
            raise JsonRefused(f"it holds a {type(item).__name__}, which is not JSON")
