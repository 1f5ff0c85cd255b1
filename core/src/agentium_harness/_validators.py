"""Shared attrs validators and typed tuple converters, so each rule is written once.

Validators follow the attrs signature ``validator(instance, attribute, value)``
and raise :class:`ValueError` (or :class:`~agentium_harness._errors.InvalidIdError`
for identifiers, itself a typed error) with a message that names the field, so
the config loader can point at the key and a host sees which argument was bad.
Booleans are refused where numbers belong: ``True`` is an ``int`` to Python but
never a count or a timeout to a person.

The tuple converters are plain named functions on purpose: mypy's attrs plugin
only understands named functions as converters, and a generic ``tuple_of(T)``
factory would erase the field's type to ``Any``. Modules whose records hold
tuples of their own record types keep a one-line named converter of their own.

The number rules (counts, durations, group seqs) are defined in
:mod:`agentium_harness._validators_numbers` and importable from here, as every
other name. This module depends on :mod:`agentium_harness._errors` (and that
part of itself) only, so every layer (ports, engine, plugins, config) can use
it without an import cycle.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

import attrs

from ._errors import InvalidArgumentError, InvalidIdError
from ._validators_numbers import (
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_SEQ,
    BoundedCount,
    BoundedDuration,
    bounded_count,
    bounded_duration,
    check_count,
    check_duration,
    exact_int,
    exact_number,
    keep_exact,
    non_negative_int,
    positive_float,
    positive_int,
    seq_field,
    seq_items,
    shown_number,
)

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")

__all__ = [
    "KEY_SEGMENT_KEPT",
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_ID_LENGTH",
    "DIGEST_FORM",
    "MAX_SEQ",
    "BoundedCount",
    "BoundedDuration",
    "bounded_count",
    "bounded_duration",
    "check_count",
    "check_duration",
    "enum_member",
    "exact_int",
    "exact_number",
    "identifier",
    "int_tuple",
    "keep_exact",
    "key_sep",
    "lone_surrogate_at",
    "non_empty_str",
    "non_negative_int",
    "optional_identifier",
    "optional_plain_str",
    "plain_str",
    "positive_float",
    "positive_int",
    "prose_text",
    "seq_field",
    "sha256_digest",
    "text_within",
    "seq_items",
    "require_instance",
    "require_instances",
    "shown_number",
    "str_pair_tuple",
    "str_tuple",
    "unicode_text",
    "valid_ids",
    "validate_id",
    "validate_label",
]

#: Longest identifier accepted, in characters.
MAX_ID_LENGTH = 256


#: Every digest the engine writes (``digest_bytes``): ``sha256:`` and 64 lowercase hex digits.
DIGEST_FORM: Final = re.compile(r"sha256:[0-9a-f]{64}")


def sha256_digest(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Exactly a ``str`` of :data:`DIGEST_FORM`: a digest the engine computed and stored itself.

    A receipt's digest is a group's, checked equal to it before it is kept: stored, any other
    text (another hash, upper case, a ``str`` subclass) is damage. The value is not shown.
    """
    if type(value) is not str or DIGEST_FORM.fullmatch(value) is None:
        shown = f"{len(value)} characters of other text" if type(value) is str else type(value).__name__
        raise InvalidArgumentError(
            f"{attribute.name} must be 'sha256:' and 64 lowercase hex digits, got {shown}"
        )


def text_within(max_bytes: int) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    """A validator: a ``str`` of at most ``max_bytes`` UTF-8 bytes (free text the engine cuts to it).

    Stored text past the bound was not written by the engine: damage, refused when it is decoded.
    A ``str`` subclass is measured as the plain text it holds. The message never shows the text.
    """

    def check(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{attribute.name} must be a str, got {type(value).__name__}")
        size = len(str.__str__(value).encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            raise InvalidArgumentError(
                f"{attribute.name} must be at most {max_bytes} UTF-8 bytes, got {size}"
            )

    return check


def non_empty_str(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """A ``str`` with at least one non-whitespace character."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{attribute.name} must be a non-empty string, got {value!r}")


def plain_str(value: str) -> str:
    """``value`` itself when it is an exact ``str`` (or not a ``str``), else a plain copy of its text.

    The converter of every text and id field of a record: a ``str`` subclass
    (an enum's ``str`` mixin, ``markupsafe.Markup``, or one whose own
    ``__len__``, ``encode``, ``__hash__`` or ``__eq__`` lies or raises) is
    kept as the exact text it holds, so nothing later (a check, a key, a
    cache, an encoding) runs a method of the host's class. The copy is made
    by ``str.__str__``, the ``str`` type's own slot, which copies the
    characters without calling any method of the subclass; its canonical
    JSON is the same as the subclass's (the encoder writes the characters).
    Anything that is not a ``str`` is returned as it is, for the field's
    validator or check to refuse with its own typed error.
    """
    if type(value) is str or not isinstance(value, str):
        return value
    return str.__str__(value)


def optional_plain_str(value: str | None) -> str | None:
    """:func:`plain_str` for a field that may be ``None``."""
    if type(value) is str or not isinstance(value, str):
        return value
    return str.__str__(value)


def validate_id(value: object, field: str) -> str:
    """Return ``value`` if it is an acceptable identifier, else raise :class:`InvalidIdError`.

    An identifier is a non-empty ``str`` of at most :data:`MAX_ID_LENGTH`
    characters with no control character (NUL, C0/C1, DEL) and no lone surrogate.
    A ``str`` subclass is checked as the plain text it holds and that plain
    copy is returned (see :func:`plain_str`): what is checked is exactly what
    a caller then keys and encodes, whatever the subclass's own ``__len__``,
    ``__iter__`` or ``encode`` would say. Callers use the returned value.
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise InvalidIdError(field, f"expected a string, got {type(value).__name__}")
        value = str.__str__(value)
    if not value:
        raise InvalidIdError(field, "must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(field, f"{len(value)} characters; at most {MAX_ID_LENGTH} allowed")
    if value.isprintable():
        # At C speed: a printable str holds no control character (Cc) and no surrogate (Cs),
        # both non-printable in the same Unicode database, so the loop below would pass (an
        # exact str by now: a subclass could iterate other characters than it holds).
        return value
    _refuse_controls(value, field)
    return value


def _refuse_controls(value: str, field: str) -> None:
    """Refuse a control character (NUL, C0/C1, DEL) or a lone surrogate in exact str ``value``."""
    for ch in value:
        # Category "Cc" covers NUL, C0/C1 controls and DEL.
        if unicodedata.category(ch) == "Cc":
            raise InvalidIdError(field, f"contains control character U+{ord(ch):04X}")
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise InvalidIdError(field, "contains a lone surrogate")


def validate_label(value: object, field: str) -> str:
    """:func:`validate_id`'s rules but its length cap: for an id built of other ids, or a host's label.

    A non-empty ``str`` with no control character and no lone surrogate (a
    plain copy of a subclass's text is returned), of any length: a recall
    source id encodes a whole scope (up to five ids of 256 characters each),
    and a host's source id may be a long URL. Raises :class:`InvalidIdError`.
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise InvalidIdError(field, f"expected a string, got {type(value).__name__}")
        value = str.__str__(value)
    if len(value) <= MAX_ID_LENGTH:
        return validate_id(value, field)  # an empty one too
    if not value.isprintable():
        _refuse_controls(value, field)
    return value


def valid_ids(values: Iterable[str | None]) -> bool:
    """True when every one of ``values`` passes :func:`validate_id` (``None``, an absent optional, passes).

    For a cache of records built from ids, before it keeps one: attrs' switch that turns
    validators off is global, so another thread may have turned it off while the record was
    built (and on again since); this check is no attrs validator, and no switch turns it off.
    """
    try:
        for value in values:
            if value is not None:
                validate_id(value, "id")
    except InvalidIdError:
        return False
    return True


def lone_surrogate_at(text: str) -> int | None:
    """Index of the first lone surrogate in ``text``, or ``None`` when it is valid Unicode text.

    A lone surrogate (U+D800..U+DFFF not in a pair) is what Python makes of
    bytes that were not UTF-8 (``surrogateescape``, ``sys.argv``) or of a
    JSON escape of half a pair; it cannot be encoded as UTF-8, so it can never be
    stored, hashed or sent. Text is checked with this before it is used.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def unicode_text(value: object, name: str, hint: str = "") -> str:
    """A plain ``str`` copy of ``value`` when it is valid Unicode text; else :class:`InvalidArgumentError`.

    Valid means it encodes as UTF-8: no lone surrogate (see
    :func:`lone_surrogate_at`), which could never be stored, hashed or sent.
    A ``str`` subclass is read with ``str.__str__`` and the plain copy is
    returned, so none of its own methods (an ``encode`` that hides a
    surrogate) is trusted afterwards. The error names ``name`` and the type
    or position only, never the text (it may be large or private); ``hint``
    is appended to the one for a surrogate.
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__}")
    text = str.__str__(value)
    at = lone_surrogate_at(text)
    if at is not None:
        raise InvalidArgumentError(
            f"{name} is not valid Unicode text: it holds a lone surrogate (U+{ord(text[at]):04X}) at index "
            f"{at}{hint}"
        )
    return text


#: C0 controls but tab and newline: nothing prose holds (NUL ends a C string, ESC drives a terminal).
_PROSE_CONTROL: Final = re.compile("[\x00-\x08\x0b-\x1f]")


def prose_text(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """A ``str`` of prose: valid Unicode text with no C0 control character but tab and newline.

    For free text a person writes into a config file (host instructions): a NUL, an escape
    sequence or a lone surrogate (an environment variable holding bytes that are not UTF-8)
    there is a mistake the provider would otherwise meet first. The message names the field
    and the position, never the text (it may be private, or a secret from the environment).
    """
    name = attribute.name
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__}")
    text = str.__str__(value)
    found = _PROSE_CONTROL.search(text)
    if found is not None:
        raise InvalidArgumentError(
            f"{name} holds control character U+{ord(found.group()):04X} at character {found.start()}; "
            "only tab and newline are allowed"
        )
    at = lone_surrogate_at(text)
    if at is not None:
        raise InvalidArgumentError(
            f"{name} is not valid Unicode text: it holds a lone surrogate (U+{ord(text[at]):04X}) at "
            f"character {at}, as text decoded from bytes that were not UTF-8 does"
        )


def enum_member(kind: type[E], value: object, name: str) -> E:
    """``value`` as a member of ``kind``: a member, or a member's value as a ``str``; else refused.

    Raises :class:`InvalidArgumentError` listing the accepted values. An
    unchecked string (or a typo of one) compared with ``is`` against a
    member would silently mean something else.
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    choices = ", ".join(repr(member.value) for member in kind)
    raise InvalidArgumentError(f"{name} must be a {kind.__name__} or one of {choices}, got {value!r:.80}")


def identifier(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """An identifier (see :func:`validate_id`)."""
    validate_id(value, attribute.name)


def optional_identifier(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """``None`` or an identifier (see :func:`validate_id`)."""
    if value is not None:
        validate_id(value, attribute.name)


def _items(value: Iterable[Any], what: str) -> tuple[Any, ...]:
    if type(value) is tuple:
        return value  # what ``tuple(value)`` returns, without the ABC's Python-level check below
    # A lone string is iterable, so tuple("shell") would silently become
    # ("s", "h", ...): refuse it instead of guessing.
    if isinstance(value, str | bytes):
        raise InvalidArgumentError(f"expected a sequence of {what}, got a single {type(value).__name__}")
    if not isinstance(value, Iterable):
        raise InvalidArgumentError(f"expected a sequence of {what}, got {type(value).__name__}")
    return tuple(value)


def str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Typed tuple converter for ``tuple[str, ...]`` fields; a lone string is refused."""
    return _items(value, "strings")


def int_tuple(value: Iterable[int]) -> tuple[int, ...]:
    """Typed tuple converter for ``tuple[int, ...]`` fields; a lone string is refused."""
    return _items(value, "integers")


def str_pair_tuple(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Typed tuple converter for ``tuple[tuple[str, str], ...]`` fields (each pair made a tuple)."""
    try:
        pairs: tuple[tuple[str, str], ...] = tuple((a, b) for a, b in _items(value, "pairs"))
    except (TypeError, ValueError) as exc:  # an item that is no pair: [1] or [("a", "b", "c")]
        if isinstance(exc, InvalidArgumentError):
            raise
        raise InvalidArgumentError(f"expected a sequence of (name, value) pairs: {exc}") from None
    return pairs


def require_instance(value: object, kind: type[T], what: str) -> T:
    """``value`` if it is a ``kind``; else :class:`InvalidArgumentError` naming ``what`` and the type given.

    For helpers that read attributes of a record argument: without it, a ``str``, ``None``
    or ``dict`` in its place raised a bare ``AttributeError`` from deep inside the helper.
    """
    if not isinstance(value, kind):
        raise InvalidArgumentError(f"{what} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def require_instances(values: object, kind: type[T], what: str) -> tuple[T, ...]:
    """``values`` as a tuple if it is an iterable (not a string) of ``kind``, else InvalidArgumentError."""
    if isinstance(values, str | bytes | dict) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"{what} must be a sequence of {kind.__name__}, got {type(values).__name__}"
        )
    items = tuple(values)
    for item in items:
        require_instance(item, kind, f"each item of {what}")
    return items


#: The characters an encoded key segment keeps as they are (``_scope.encode_segment``); every
#: other byte is written ``%XX``, and an absent optional segment is ``~``.
KEY_SEGMENT_KEPT: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_SEGMENT_CHARS: Final = frozenset(KEY_SEGMENT_KEPT) | {"%", "~"}


def key_sep(sep: object) -> str:
    """``sep`` if it keeps joined key segments injective: a non-empty ``str`` of none of their characters.

    :raises InvalidArgumentError: otherwise; "_" or "a" joined ("a_b", "c") and ("a", "b_c")
        alike, and an ``int`` raised ``AttributeError``.
    """
    if type(sep) is not str or not sep or not _SEGMENT_CHARS.isdisjoint(sep):
        raise InvalidArgumentError(
            f"sep must be a non-empty str without letters, digits, '_', '-', '%' or '~' (such as '/' or "
            f"':'), got {sep!r}"
        )
    return sep
