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
