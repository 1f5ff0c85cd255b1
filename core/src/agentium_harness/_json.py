"""JSON text in and out: strict, bounded decoding, and the digest of encoded bytes.

The one way Agentium reads JSON it did not just write (:func:`decode_json`:
size and depth caps checked on the bytes before parsing, no duplicate keys,
no ``NaN``/``Infinity``, valid UTF-8, no lone surrogate) and the one digest
of bytes (:func:`digest_bytes`). Records become JSON and back through the
converters of :mod:`agentium_harness._codec` (``canonical_json``,
``from_json``), which use these.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from typing import Any, Final

from ._errors import InvalidJSONError

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "copy_plain_json",
    "decode_json",
    "digest_bytes",
    "json_depth_exceeds",
    "same_plain_json",
]


#: Deepest nesting of arrays and objects :func:`decode_json` accepts by default.
#: A snapshot's own records nest about ten deep; the rest is room for tool
#: call arguments, which the engine caps at :data:`MAX_ARGUMENT_DEPTH`.
MAX_JSON_DEPTH: Final = 128
#: Largest JSON text, in UTF-8 bytes, :func:`decode_json` accepts by default (256 MiB).
MAX_JSON_BYTES: Final = 256 * 1024 * 1024
#: Deepest nesting a tool call's arguments may have (the engine refuses a
#: reply with deeper ones), so every stored group decodes under :data:`MAX_JSON_DEPTH`.
MAX_ARGUMENT_DEPTH: Final = 64

# A JSON string: a quote, then anything but a quote or a backslash, or a
# backslash and any one byte, then a quote. UTF-8 continuation bytes are never
# ASCII, so this is exact on the encoded text.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# +1 for an opening bracket, -1 for a closing one, indexed by byte value.
_BRACKET_STEP = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]
# A \uD800-\uDFFF escape: only then can the decoded text hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def json_depth_exceeds(data: bytes, max_depth: int) -> bool:
    """Whether JSON text ``data`` nests arrays and objects deeper than ``max_depth``, without parsing it.

    Strings are skipped first (a bracket inside a string is text), then the
    running count of open brackets is taken over what remains. An
    unterminated string makes the scan count more than the parser would
    reach, never less, so a refusal can be too eager only for text that is
    not JSON anyway. Runs at C speed: no recursion, whatever the input.
    """
    if data.count(b"[") + data.count(b"{") <= max_depth:
        # Fewer opening brackets in all than the bound, strings included: no
        # nesting can exceed it. Most stored rows end here, without the regex.
        return False
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= max_depth:
        return False
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0) > max_depth


def _refuse_constant(name: str) -> Any:
    # json.loads accepts NaN/Infinity by default; canonical JSON never holds them.
    raise InvalidJSONError(f"{name} is not valid canonical JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        # "1e999" parses as inf, which canonical JSON cannot hold.
        raise InvalidJSONError(f"the number {text[:40]} is too large to be finite")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidJSONError(f"the object key {key[:80]!r} appears twice")
            seen.add(key)
    return result


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=_refuse_constant, parse_float=_finite_float
)


def decode_json(
    data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> Any:
    r"""Parse JSON text strictly and within bounds; the one way Agentium reads JSON it did not just write.

    Refused with :class:`~agentium_harness._errors.InvalidJSONError` (before
    parsing where it can be told from the bytes, so no ``RecursionError`` or
    ``MemoryError`` can escape):

    - text over ``max_bytes`` UTF-8 bytes, or nesting arrays/objects deeper
      than ``max_depth`` (checked on the bytes before parsing);
    - bytes that are not UTF-8, or a ``str`` holding a lone surrogate;
    - malformed JSON, a duplicate object key, ``NaN``/``Infinity``, a
      number too large to be finite, an integer too long to convert, and a
      string whose ``\u`` escapes leave a lone surrogate (it could never be
      encoded again).

    Use it for stored rows, provider replies, case files: anything read
    from outside. Plugins get it from :mod:`agentium_harness.plugin_api`.
    """
    if isinstance(data, str):
        if len(data) > max_bytes:  # characters: a cheap bound before encoding
            raise InvalidJSONError(f"the JSON text is larger than {max_bytes} bytes", limit="max_bytes")
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidJSONError(f"the JSON text holds a lone surrogate at index {exc.start}") from exc
    elif isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
    else:
        raise InvalidJSONError(f"expected JSON text (str or bytes), got {type(data).__name__}")
    if len(raw) > max_bytes:
        raise InvalidJSONError(
            f"the JSON text is {len(raw)} bytes, larger than {max_bytes}", limit="max_bytes"
        )
    if json_depth_exceeds(raw, max_depth):
        raise InvalidJSONError(
            f"the JSON text nests arrays or objects deeper than {max_depth} levels", limit="max_depth"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJSONError(f"the JSON text is not valid UTF-8 (byte {exc.start})") from exc
    try:
        value = _DECODER.decode(text)
    except InvalidJSONError:
        raise
    except RecursionError as exc:  # pragma: no cover - the depth scan above bounds the parser's recursion
        raise InvalidJSONError("the JSON text nests too deeply to parse", limit="max_depth") from exc
    except (ValueError, TypeError) as exc:  # JSONDecodeError, int digit limits
        raise InvalidJSONError(f"not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidJSONError("a string in the JSON text holds a lone surrogate escape") from exc
    return value


def digest_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def copy_plain_json(value: Any) -> Any:
    """A copy of plain JSON data: new dicts and lists all the way down (the rest is immutable).

    Stored data is checked to nest at most :data:`MAX_JSON_DEPTH` deep, so the
    recursion is bounded.
    """
    kind = type(value)
    if kind is dict:
        out = value.copy()
        for k, v in out.items():
            if type(v) is dict or type(v) is list:
                out[k] = copy_plain_json(v)
        return out
    if kind is list:
        return [copy_plain_json(v) if type(v) is dict or type(v) is list else v for v in value]
    return value


#: The scalar types plain JSON decodes to.
_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def same_plain_json(copy: Any, value: Any) -> bool:
    """Whether ``value`` is exactly ``copy``, plain JSON data decoded from ``value``'s JSON text.

    The check that a value given as plain JSON is plain JSON: what its
    encoding changes (a tuple written as an array, a non-string key as a
    string) makes it differ. Type-strict, and no method of the host's runs:
    a ``dict`` or ``list`` subclass whose ``__eq__`` says ``True`` (so a
    tuple inside would silently come back a list) is compared by what it
    holds. A value of exact types only (:func:`_exact_types`, about 0.1 µs
    a node) is compared by the C comparison, which then runs nothing of the
    host's and never takes a tuple for a list or a number for a string key;
    one holding a subclass anywhere (a ``str`` enum, a ``dict`` of the
    host's) by :func:`_strictly_same`, with the base types' own methods.
    """
    try:
        if _exact_types(value):
            return bool(copy == value)
        return _strictly_same(copy, value)
    except Exception:  # an object only claiming a type (its __class__ lies): no plain JSON
        return False


def _exact_types(value: Any) -> bool:
    """Whether ``value`` holds exact dicts with ``str`` keys, lists and exact scalars only.

    Iterating an exact dict or list, and ``type()``, run nothing of the
    host's; containers are stacked, scalars checked where they are found.
    """
    stack = [value]
    push = stack.append
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is dict:
            for key, item in node.items():
                if type(key) is not str:
                    return False
                of = type(item)
                if of is dict or of is list:
                    push(item)
                elif of not in _SCALAR_TYPES:
                    return False
        elif kind is list:
            for item in node:
                of = type(item)
                if of is dict or of is list:
                    push(item)
                elif of not in _SCALAR_TYPES:
                    return False
        elif kind not in _SCALAR_TYPES:
            return False
    return True


def _strictly_same(copy: Any, value: Any) -> bool:
    """:func:`same_plain_json` for a value holding subclasses: each read with its base type's own methods.

    A ``str``, ``int`` or ``float`` subclass equals the plain value it holds
    (its JSON is that value's); a ``dict`` or ``list`` subclass is read with
    ``dict.items`` and ``list.__iter__`` (what it holds, whatever its own
    methods say); a tuple, a non-string key or anything else differs. The
    copy is plain JSON nested at most :data:`MAX_ARGUMENT_DEPTH` deep (the
    caller checked), so the walk is bounded.
    """
    stack = [(copy, value)]
    while stack:
        mine, theirs = stack.pop()
        if theirs is None or theirs is True or theirs is False:
            same = mine is theirs
        elif isinstance(theirs, str):
            same = type(mine) is str and mine == str.__str__(theirs)
        elif isinstance(theirs, int):
            same = type(mine) is int and mine == int.__index__(theirs)
        elif isinstance(theirs, float):
            same = type(mine) is float and mine == float.__float__(theirs)
        elif isinstance(theirs, dict):
            same = type(mine) is dict and len(mine) == dict.__len__(theirs)
            for key, item in dict.items(theirs) if same else ():
                if not isinstance(key, str) or (plain := str.__str__(key)) not in mine:
                    return False
                stack.append((mine[plain], item))
        elif isinstance(theirs, list):
            same = type(mine) is list and len(mine) == list.__len__(theirs)
            if same:
                stack.extend(zip(mine, list.__iter__(theirs), strict=True))
        else:
            same = False  # a tuple, or anything JSON would have written as something else
        if not same:
            return False
    return True
