"""The one data language: cattrs converters made on demand and one canonical JSON encoding.

Every record in Agentium is a frozen attrs class. A converter turns them into
plain data (dicts, lists, strings, numbers) and back; unknown keys are always
refused when structuring. :func:`canonical_json` gives the bytes digests are
computed over: sorted keys, UTF-8, no insignificant whitespace, no ``NaN``.
No pickle is used anywhere.

Converters are made by :func:`make_converter`; one in use by several callers
(:func:`shared_converter`) is never changed:

- ``strict=True`` (what stored data is read with: :func:`structure`,
  :func:`from_json`) never coerces. ``null`` where a string belongs, a number
  where text belongs, a string, bool or float where an int belongs, a string
  where an array belongs: each is an error, never ``"None"``, ``"12"`` or ``0``.
- ``strict=False`` keeps cattrs' coercions.

Times (:class:`datetime.datetime`) are encoded as fixed-width UTC text,
``2026-01-31T09:30:00.000000Z`` (:func:`iso_utc`), so text order is time
order and a record with a time has one canonical encoding. Only
timezone-aware times are encoded (a naive one raises :class:`EncodingError`),
and only text :func:`iso_utc` could have written decodes back.

JSON text itself (strict bounded decoding, the digest of bytes) is
:mod:`agentium_harness._json`'s; :func:`canonical_json` and
:func:`from_json` join it to the records.

The config loader uses the same strict rules with TOML's words for types
(:class:`TypeWords`), so a person reads "expected an integer, got string".

Adapters that need their own structure rule (a record that may also be
written as a bare string, say) call :func:`register_structure_hook` once at
import time. The rule is a *builder*: it gets the converter it is installed on
and returns the hook, so nested fields are structured with that converter's
own (strict or lenient) rules. Every converter made afterwards has the rule.
"""

from __future__ import annotations

import enum
import json
import re
import threading
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import (
    homogenous_tuple_structure_factory,
    is_any_set,
    is_frozenset,
    is_mapping,
    is_sequence,
    list_structure_factory,
    mapping_structure_factory,
)
from cattrs.gen import make_dict_unstructure_fn

from ._errors import EncodingError, InvalidArgumentError, InvalidJSONError, RecordDecodeError

# JSON text itself (bounded decoding, digests of bytes) is _json's; these names stay importable from here.
from ._json import (
    MAX_ARGUMENT_DEPTH,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    decode_json,
    digest_bytes,
    json_depth_exceeds,
)

__all__ = [
    "JSON_WORDS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "StrictTypeError",
    "StructureHook",
    "StructureRule",
    "canonical_json",
    "converter",
    "decode_json",
    "digest_bytes",
    "digest_of",
    "from_json",
    "iso_utc",
    "json_depth_exceeds",
    "make_converter",
    "parse_iso_utc",
    "register_structure_hook",
    "shared_converter",
    "structure",
    "to_json",
    "TypeWords",
    "unstructure",
]

T = TypeVar("T")

#: A cattrs structure hook: ``hook(data, cls) -> record``.
StructureHook = Callable[[Any, Any], Any]
#: Builds a structure hook for the converter it is given (see :func:`register_structure_hook`).
StructureRule = Callable[[cattrs.Converter], StructureHook]


def _canonical_list(items: Iterable[Any]) -> list[Any]:
    # Sets have no order of their own (and string hashing is randomised per
    # process), so they become lists sorted by each item's canonical JSON.
    return sorted(
        items, key=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    )


# -- times ---------------------------------------------------------------------------------------


def iso_utc(when: datetime) -> str:
    """A fixed-width UTC text form (``0001-01-01T00:00:00.000000Z``): text order is time order.

    A naive ``when`` is taken as local time (what :meth:`datetime.astimezone`
    does); records are encoded with :func:`_unstructure_datetime`, which refuses it.
    Anything but a ``datetime`` is :class:`~agentium_harness.InvalidArgumentError`.
    """
    if not isinstance(when, datetime):  # it raised AttributeError ('str' has no 'astimezone')
        raise InvalidArgumentError(f"when must be a datetime, got {type(when).__name__}")
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


def parse_iso_utc(text: object) -> datetime:
    """Invert :func:`iso_utc`; ``ValueError`` on anything it could not have written."""
    if not isinstance(text, str) or not _ISO.fullmatch(text):
        raise ValueError(f"not a stored UTC time: {text!r}")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def _unstructure_datetime(when: datetime) -> str:
    if when.tzinfo is None or when.utcoffset() is None:
        # A naive time names no instant: encoding it would store whatever the machine's zone says.
        raise EncodingError(f"cannot encode {when!r}: only timezone-aware datetimes are encoded")
    return iso_utc(when)


def _structure_datetime(value: object, _: type) -> datetime:
    try:
        return parse_iso_utc(value)
    except ValueError as exc:
        raise StrictTypeError(
            f"expected a UTC time like 2026-01-31T09:30:00.000000Z, got {_json_type(value)}"
        ) from exc


# -- strict scalar and collection rules ---------------------------------------------------------


class StrictTypeError(TypeError):
    """A value of the wrong type for a strict converter; its message is shown as is."""


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@attrs.frozen(slots=True)
class TypeWords:
    """How a strict converter names types in its messages.

    Stored data is JSON ("got null", "expected an object"); the config loader
    passes TOML's words ("got string", "expected a table"). The rules are the
    same either way: only the messages differ.
    """

    describe: Callable[[object], str] = _json_type
    mapping: str = "an object"
    array: str = "an array"


#: The words of stored data.
JSON_WORDS: Final = TypeWords()


def _strict_scalars(words: TypeWords) -> dict[type, StructureHook]:
    """Structure hooks for the scalar types that never convert a value of another type."""
    describe = words.describe

    def strict_str(value: object, _: type) -> str:
        if not isinstance(value, str):
            raise StrictTypeError(f"expected a string, got {describe(value)}")
        return value

    def strict_int(value: object, _: type) -> int:
        # bool is an int subclass; True must not become 1.
        if not isinstance(value, int) or isinstance(value, bool):
            raise StrictTypeError(f"expected an integer, got {describe(value)}")
        return value

    def strict_float(value: object, _: type) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise StrictTypeError(f"expected a number, got {describe(value)}")
        return float(value)

    def strict_bool(value: object, _: type) -> bool:
        if not isinstance(value, bool):
            raise StrictTypeError(f"expected true or false, got {describe(value)}")
        return value

    def strict_bytes(value: object, _: type) -> bytes:
        if not isinstance(value, bytes):
            raise StrictTypeError(f"expected bytes, got {describe(value)}")
        return value

    return {str: strict_str, int: strict_int, float: strict_float, bool: strict_bool, bytes: strict_bytes}


def _strict_enum(words: TypeWords) -> StructureHook:
    # An enum's members never change: the types of their values are collected
    # once per enum class, not once per decoded value (a history read decodes
    # a role per message).
    value_types: dict[Any, frozenset[type]] = {}

    def hook(value: object, cls: Any) -> enum.Enum:
        # Only the exact type of the members' values is accepted: an IntEnum
        # must not take True for 1, a StrEnum must not take 1 for "1".
        types = value_types.get(cls)
        if types is None:
            types = value_types[cls] = frozenset(type(member.value) for member in cls)
        if type(value) not in types:
            raise StrictTypeError(f"expected one of {[m.value for m in cls]}, got {words.describe(value)}")
        result: enum.Enum = cls(value)
        return result

    return hook


def _is_collection(type_: Any) -> bool:
    return bool(is_sequence(type_) or is_any_set(type_) or is_mapping(type_))


def _strict_collection_factory(
    words: TypeWords,
) -> Callable[[Any, cattrs.Converter], StructureHook]:
    """Check the container type first, then structure items with the converter's own rules.

    cattrs would build a tuple from a string (``"abc"`` -> ``("a", "b", "c")``)
    or a dict from any iterable of pairs; stored data never means that.
    """

    def factory(type_: Any, conv: cattrs.Converter) -> StructureHook:
        inner: StructureHook
        wanted: tuple[type, ...] = (list, tuple)
        expected = words.array
        if is_mapping(type_):
            # Not conv.gen_structure_mapping: it registers its result as the
            # type's direct hook, which would replace this checking hook later.
            origin = get_origin(type_) or type_
            target = origin if isinstance(origin, type) and issubclass(origin, dict) else dict
            inner = mapping_structure_factory(
                type_, conv, target, detailed_validation=conv.detailed_validation
            )
            wanted, expected = (dict,), words.mapping
        elif get_origin(type_) is tuple:
            args = get_args(type_)
            if len(args) == 2 and args[1] is Ellipsis:
                inner = homogenous_tuple_structure_factory(type_, conv)
            else:
                inner = conv.gen_structure_hetero_tuple(type_)
        elif is_any_set(type_):
            # Sets are stored as (sorted) lists; the collection type is rebuilt here.
            inner = conv._structure_frozenset if is_frozenset(type_) else conv._structure_set
        elif get_origin(type_) in (list, None):
            inner = list_structure_factory(type_, conv)
        else:
            # Abstract sequences (Sequence[T]) structure to tuples, as cattrs does.
            inner = homogenous_tuple_structure_factory(type_, conv)

        def hook(value: Any, target: Any) -> Any:
            if not isinstance(value, wanted):
                raise StrictTypeError(f"expected {expected}, got {words.describe(value)}")
            return build(value, target)

        # Declared once as the plain hook type: mypy would otherwise keep the
        # narrower type of whichever branch assigned ``inner``.
        build: StructureHook = inner
        return hook

    return factory


# -- registry of adapter rules ------------------------------------------------------------------

# Rules by record class, in registration order. Only register_structure_hook
# changes it; converters copy the rules when they are made, so a converter in
# use never changes under its caller.
_RULES: dict[type, StructureRule] = {}
# Both locks are re-entrant: what they guard allocates (the rules' copy, a whole converter), so a
# collection may run in the holding thread, and a finalizer it runs (or a signal handler) that
# encodes or decodes a record comes back here in that thread; a plain lock would wait for itself.
_RULES_LOCK = threading.RLock()
# Shared converters (structure()/unstructure()'s, the config loader's), keyed by the function that
# builds each, with the rules' generation they were made at: remade when a rule is added since.
_SHARED: dict[Callable[[], cattrs.Converter], tuple[int, cattrs.Converter]] = {}
_SHARED_LOCK = threading.RLock()
_generation = 0


def register_structure_hook(cls: type, rule: StructureRule) -> None:
    """Teach every converter :func:`make_converter` makes from now on how to structure ``cls``.

    ``rule(conv)`` returns the hook ``hook(data, cls) -> instance`` for the
    converter ``conv`` it is installed on (the strict stored-data converter,
    the lenient one, or the config loader's). Build nested parts
    with ``conv`` itself, e.g.
    ``cattrs.gen.make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)``,
    so they follow that converter's rules instead of a fixed one. Call it once,
    at import time of the module that defines ``cls``; registering ``cls``
    again replaces its rule. Converters made earlier are not changed; the
    shared ones (the stored-data converters, the config loader's) are made
    anew at their next use, with the rule.
    """
    global _generation
    if not isinstance(cls, type):
        raise TypeError(f"register_structure_hook needs a class, got {cls!r}")
    if not callable(rule):
        raise TypeError(f"the rule for {cls.__name__} must be callable, got {rule!r}")
    with _RULES_LOCK:
        _RULES.pop(cls, None)
        _RULES[cls] = rule
        _generation += 1


def _install_rule(conv: cattrs.Converter, cls: type, rule: StructureRule) -> None:
    def predicate(type_: Any) -> bool:
        return type_ is cls

    # Two required parameters: cattrs passes the converter actually in use,
    # so a copy of ``conv`` builds its hook with its own rules.
    def factory(type_: Any, current: cattrs.Converter) -> StructureHook:
        return rule(current)

    conv.register_structure_hook_factory(predicate, factory)


def make_converter(*, strict: bool, words: TypeWords | None = None) -> cattrs.Converter:
    """A new converter for Agentium records, with every rule registered so far.

    Both kinds refuse unknown keys, unstructure enums to their values and sets
    to sorted lists. ``strict=True`` never coerces a value into another type
    (see the module docstring); its messages name types with ``words``
    (:data:`JSON_WORDS` when ``None``; the config loader passes TOML's). ``strict=False`` keeps
    cattrs' coercions. The converter is the caller's: change it freely, it is
    not shared.
    """
    conv = cattrs.Converter(
        forbid_extra_keys=True, unstruct_collection_overrides={AbstractSet: _canonical_list}
    )
    # Enums become their plain values, so the canonical encoding never depends
    # on how a JSON library treats enum subclasses. StrEnum and IntEnum are
    # named too: their MRO puts str/int before Enum, and cattrs would
    # otherwise pick the str/int identity hook and hand back the member itself.
    for enum_base in (enum.Enum, enum.StrEnum, enum.IntEnum):
        conv.register_unstructure_hook(enum_base, lambda member: member.value)
    # Times are one canonical text form, strict or lenient (a datetime has no JSON type of its own).
    conv.register_unstructure_hook(datetime, _unstructure_datetime)
    conv.register_structure_hook(datetime, _structure_datetime)
    if strict:
        words = JSON_WORDS if words is None else words
        for scalar, hook in _strict_scalars(words).items():
            conv.register_structure_hook(scalar, hook)
        # Class hooks dispatch along the MRO, where a StrEnum finds ``str``
        # before ``Enum``: the enum bases are named so enums get the enum rule.
        enum_hook = _strict_enum(words)
        for enum_base in (enum.Enum, enum.StrEnum, enum.IntEnum):
            conv.register_structure_hook(enum_base, enum_hook)
        conv.register_structure_hook_factory(_is_collection, _strict_collection_factory(words))
    # A record that gained an optional field later names it in
    # ``__agentium_omit_if_none__``: absent stays absent in the encoding, so
    # records written before the field existed keep their bytes and digests.
    conv.register_unstructure_hook_factory(_omits_none, _omit_none_factory)
    with _RULES_LOCK:
        rules = list(_RULES.items())
    for cls, rule in rules:
        _install_rule(conv, cls, rule)
    return conv


def _omits_none(type_: Any) -> bool:
    return (
        isinstance(type_, type) and attrs.has(type_) and bool(getattr(type_, "__agentium_omit_if_none__", ()))
    )


def _omit_none_factory(type_: Any, current: cattrs.Converter) -> Callable[[Any], Any]:
    fields: tuple[str, ...] = type_.__agentium_omit_if_none__
    base = make_dict_unstructure_fn(type_, current)

    def unstructure_omitting(obj: Any) -> Any:
        data = base(obj)
        for name in fields:
            if data.get(name, 0) is None:
                del data[name]
        return data

    return unstructure_omitting


def shared_converter(build: Callable[[], cattrs.Converter]) -> cattrs.Converter:
    """The converter ``build`` makes, made once per set of registered rules and shared by every caller.

    A cattrs converter refers to itself through its hook dispatch: one made
    per call (per config load, per decode) is left to the cycle collector, some
    600 objects each time. So :func:`structure`, :func:`unstructure` and the
    config loader each share one, remade by the first call after a rule was
    added (:func:`register_structure_hook`). ``build`` (a module-level
    function: it is the key) makes it with :func:`make_converter`; what it
    returns is only used to structure and unstructure, never changed (a hook
    registered on it would reach every other caller).
    """
    found = _SHARED.get(build)
    if found is not None and found[0] == _generation:
        return found[1]
    with _SHARED_LOCK:  # two threads' first calls make one converter, not two (one left to the collector)
        found = _SHARED.get(build)
        if found is not None and found[0] == _generation:
            return found[1]
        generation = _generation  # read first: a rule added while building remakes it on the next call
        conv = build()
        _SHARED[build] = (generation, conv)
        return conv


def _strict_converter() -> cattrs.Converter:
    return make_converter(strict=True)


def _lenient_converter() -> cattrs.Converter:
    return make_converter(strict=False)


def _cached(strict: bool) -> cattrs.Converter:
    """The module's own converter of one kind (:func:`shared_converter`)."""
    return shared_converter(_strict_converter if strict else _lenient_converter)


# -- encoding and decoding ----------------------------------------------------------------------


def unstructure(obj: Any) -> Any:
    """Turn a record (or container of records) into plain JSON-compatible data."""
    return _cached(True).unstructure(obj)


def _format_issue(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, StrictTypeError):
        return str(exc)
    return cattrs.v.format_exception(exc, type_)


def _decode_error(exc: Exception, cls: type) -> RecordDecodeError:
    if isinstance(exc, cattrs.BaseValidationError):
        issues = cattrs.transform_error(exc, format_exception=_format_issue)
    else:
        issues = [f"{type(exc).__name__}: {exc} @ $"]
    return RecordDecodeError(cls.__name__, issues)


def structure(data: Any, cls: type[T]) -> T:
    """Build a record of type ``cls`` from plain data, strictly (no coercion, no unknown keys).

    :raises RecordDecodeError: listing every problem with its ``$``-path; the
        underlying cattrs error is its ``__cause__``.
    """
    try:
        return _cached(True).structure(data, cls)
    except Exception as exc:  # cattrs groups, attrs validators (ValueError), enum lookups
        raise _decode_error(exc, cls) from exc


# What ``json.dumps`` with these options builds on every call: one encoder, made once. Its
# ``encode`` keeps no state between calls (each makes its own), so threads share it safely.
_CANONICAL: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(data: Any) -> bytes:
    """Canonical JSON bytes of plain data or of a record: sorted keys, UTF-8, compact.

    :raises EncodingError: the data holds a non-finite float (``nan``,
        ``inf``), a string with a lone surrogate (not encodable as UTF-8) or
        something JSON cannot represent.
    """
    plain = (
        data if isinstance(data, dict | list | str | int | float | bool | type(None)) else unstructure(data)
    )
    try:
        return _CANONICAL.encode(plain).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodingError(
            f"cannot encode as canonical JSON: a string holds a lone surrogate ({exc.reason})"
        ) from exc
    except (ValueError, TypeError, RecursionError) as exc:
        raise EncodingError(f"cannot encode as canonical JSON: {exc}") from exc


def digest_of(obj: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of a record or plain value."""
    return digest_bytes(canonical_json(obj))


def to_json(obj: Any) -> str:
    """Canonical JSON text of a record."""
    return canonical_json(obj).decode("utf-8")


def from_json(
    text: str | bytes, cls: type[T], *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> T:
    """Parse JSON text (as stored) into a record of type ``cls``, strictly and within bounds.

    The text is read with :func:`decode_json` (size and depth caps, no
    duplicate keys, no ``NaN``/``Infinity``, valid UTF-8), then structured
    without coercion.

    :raises RecordDecodeError: the text is not acceptable JSON or does not describe a ``cls``.
    """
    try:
        data = decode_json(text, max_depth=max_depth, max_bytes=max_bytes)
    except InvalidJSONError as exc:
        raise RecordDecodeError(cls.__name__, [f"not valid JSON: {exc.reason}"]) from exc
    return structure(data, cls)


# -- backwards compatibility --------------------------------------------------------------------


class _LenientConverterAlias(cattrs.Converter):
    """The old module-level ``converter``: a façade over a fresh lenient converter.

    Deprecated; use :func:`make_converter` (``strict=False`` for the old
    behaviour) or :func:`structure`/:func:`unstructure`. It is never changed:
    :meth:`copy`, :meth:`structure` and :meth:`unstructure` use a converter
    made with every rule registered at the time of the call, and registering
    hooks on it is refused (use :func:`register_structure_hook`).
    """

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        """A new lenient converter with every registered rule (what ``copy()`` used to give)."""
        base = make_converter(strict=False)
        return base.copy(*args, **kwargs) if args or kwargs else base

    def structure(self, obj: Any, cl: Any) -> Any:
        """Structure leniently with every registered rule."""
        return _cached(False).structure(obj, cl)

    def unstructure(self, obj: Any, unstructure_as: Any = None) -> Any:
        """Unstructure like :func:`unstructure`."""
        return _cached(False).unstructure(obj, unstructure_as=unstructure_as)

    def register_structure_hook(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: the shared converter is not changed any more."""
        raise TypeError(
            "agentium_harness._codec.converter is read-only; use "
            "agentium_harness._codec.register_structure_hook(cls, rule) instead"
        )


#: Deprecated alias kept for code that imported it: use :func:`make_converter`.
converter: cattrs.Converter = _LenientConverterAlias(forbid_extra_keys=True)
