"""The number rules of :mod:`agentium_harness._validators`: counts, durations and group seqs.

Each bound is written once here — :data:`MAX_COUNT`, :data:`MAX_DURATION_S`,
:data:`MAX_SEQ` — with the checks and attrs validators that hold a number to
it. A number is read as the exact ``int`` or ``float`` it holds
(:func:`exact_int`, :func:`exact_number`): a subclass's own comparisons are
never trusted, and ``bool`` is refused where a number belongs (``True`` is an
``int`` to Python but never a count or a timeout to a person).

:mod:`agentium_harness._validators` re-exports every name here; import them
from there. Like it, this module depends on :mod:`agentium_harness._errors`
only.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ._errors import InvalidArgumentError

__all__ = [
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_SEQ",
    "BoundedCount",
    "BoundedDuration",
    "bounded_count",
    "bounded_duration",
    "check_count",
    "check_duration",
    "exact_int",
    "exact_number",
    "keep_exact",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "seq_field",
    "seq_items",
    "shown_number",
]


#: Ceiling of every duration Agentium accepts, in seconds (one hour): each
#: timeout, deadline, latency budget and wait. Finite and above 0 too, so no
#: setting (``1e308``, ``inf``) can void a deadline.
MAX_DURATION_S: Final = 3600.0
#: Ceiling of every count, size and budget (items, bytes, tokens, steps) unless
#: a field documents a tighter one: 10**12, inside every backend's integers and exact as a float.
MAX_COUNT: Final = 1_000_000_000_000
#: Largest ``seq`` a group may have: a session holds at most :data:`MAX_COUNT` groups, so its
#: ``next_seq`` and a seq range's exclusive end stay within :data:`MAX_COUNT` too. The one bound of
#: every record naming a group seq (the group itself, a divergence, a receipt, an erasure record's
#: digests): a stored record past it is damage, refused when it is decoded.
MAX_SEQ: Final = MAX_COUNT - 1


def exact_int(value: object) -> int | None:
    """``value`` as an exact ``int`` if it is an ``int`` other than a ``bool``, else ``None``.

    An ``int`` subclass (an ``IntEnum`` member, or one whose own comparisons,
    ``__index__`` or ``__hash__`` lie or raise) is copied with ``int.__index__``,
    the ``int`` type's own slot, which reads the number without calling any
    method of the subclass: a bound is then checked, and kept, on the number
    itself.
    """
    if type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__index__(value)
    return None


def exact_number(value: object) -> int | float | None:
    """``value`` as an exact ``int`` or ``float`` if it is a number other than a ``bool``, else ``None``.

    As :func:`exact_int`; a ``float`` subclass is copied with ``float.__float__``.
    """
    if type(value) is float:
        return value
    if isinstance(value, float):
        return float.__float__(value)
    return exact_int(value)


def shown_number(value: object) -> str:
    """How an error message shows a refused number: never by the host's own ``__repr__``.

    An exact ``int`` (a huge one said so: its ``repr`` could raise), ``float``,
    ``bool``, ``str`` or ``None`` is shown by its ``repr``; a subclass of a
    number by the number it holds; anything else by its type's name.
    """
    number = exact_number(value)
    if number is not None:
        return repr(number) if type(number) is float or abs(number) < 10**30 else "an integer out of range"
    if value is None or type(value) is bool or type(value) is str:
        return repr(value)
    return f"a {type(value).__name__}"


def keep_exact(instance: Any, attribute: attrs.Attribute[Any], value: object, exact: object) -> None:
    """Make a record's field hold ``exact``, the exact number checked, when it was given a subclass.

    A validator cannot return a value, and a converter on every number field of every
    record would cost each construction a call: the few records given a subclass are set
    again here (attrs has set every field before validators run), so no bound later
    compares with the subclass's own methods.
    """
    if exact is not value and instance is not None:  # (None: the validator called on a bare value)
        object.__setattr__(instance, attribute.name, exact)


def check_duration(value: object, name: str, *, ceiling: float = MAX_DURATION_S) -> float:
    """``value`` as a float if it is a finite number of seconds in ``(0, ceiling]``.

    The one duration rule: config keys and Python arguments alike. ``bool``,
    ``nan`` and ``inf`` are refused. Raises :class:`InvalidArgumentError`
    (a ``ValueError``) naming ``name``. A number's subclass is read as the
    number it holds (see :func:`exact_number`): its own comparisons are not trusted.
    """
    seconds = exact_number(value)
    # Exact comparisons (an int of any size against the float ceiling, never converted first);
    # nan and inf fail them.
    if seconds is None or not 0 < seconds <= ceiling:
        raise InvalidArgumentError(
            f"{name} must be a finite number of seconds in (0, {ceiling:g}], got {shown_number(value)}"
        )
    return float(seconds)


def check_count(value: object, name: str, *, minimum: int = 1, ceiling: int = MAX_COUNT) -> int:
    """``value`` if it is an ``int`` in ``minimum..ceiling`` (``bool`` refused).

    The one count rule (items, bytes, tokens, steps): config keys and Python
    arguments alike. Raises :class:`InvalidArgumentError` (a ``ValueError``)
    naming ``name``. Returns a plain ``int``: an ``int`` subclass's own
    comparisons are not trusted (one whose ``__le__`` lies would pass any bound).
    """
    plain = exact_int(value)
    if plain is None or not minimum <= plain <= ceiling:
        raise InvalidArgumentError(
            f"{name} must be an integer from {minimum} to {ceiling}, got {shown_number(value)}"
        )
    return plain


@attrs.frozen(slots=True)
class BoundedDuration:
    """attrs validator for a duration field: :func:`check_duration` with this ``ceiling``.

    ``optional`` also lets ``None`` through (meaning "use the default"). Every
    duration field of every limits record uses one, which a test checks by
    introspection, so a new field cannot escape the rule.
    """

    ceiling: float = MAX_DURATION_S
    optional: bool = False

    def __call__(self, instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        """Raise :class:`InvalidArgumentError` unless ``value`` is an acceptable duration."""
        if value is None and self.optional:
            return
        check_duration(value, attribute.name, ceiling=self.ceiling)
        if type(value) is not int and type(value) is not float:
            keep_exact(instance, attribute, value, exact_number(value))  # a subclass: its number


@attrs.frozen(slots=True)
class BoundedCount:
    """attrs validator for a count field: :func:`check_count` with this ``minimum`` and ``ceiling``."""

    minimum: int = 1
    ceiling: int = MAX_COUNT
    optional: bool = False

    def __call__(self, instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        """Raise :class:`InvalidArgumentError` unless ``value`` is an acceptable count."""
        if value is None and self.optional:
            return
        plain = check_count(value, attribute.name, minimum=self.minimum, ceiling=self.ceiling)
        keep_exact(instance, attribute, value, plain)


def bounded_duration(*, ceiling: float = MAX_DURATION_S, optional: bool = False) -> BoundedDuration:
    """The validator of a duration field in seconds: finite, above 0, at most ``ceiling``."""
    if not 0 < ceiling <= MAX_DURATION_S:
        raise ValueError(f"a duration ceiling must be in (0, {MAX_DURATION_S:g}], got {ceiling!r}")
    return BoundedDuration(ceiling, optional)


def bounded_count(*, minimum: int = 1, ceiling: int = MAX_COUNT, optional: bool = False) -> BoundedCount:
    """The validator of a count field: an int from ``minimum`` to ``ceiling``."""
    if not 0 <= minimum <= ceiling <= MAX_COUNT:
        raise ValueError(f"a count range must lie within 0..{MAX_COUNT}, got {minimum}..{ceiling}")
    return BoundedCount(minimum, ceiling, optional)


#: A count of at least 1 (``bool`` refused), at most :data:`MAX_COUNT`.
positive_int: Final = bounded_count()
#: A duration in seconds: finite, above 0, at most :data:`MAX_DURATION_S`.
positive_float: Final = bounded_duration()


def non_negative_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` of at least 0 (``bool`` refused): a position such as a ``seq``, not a limit.

    An ``int`` subclass is checked, and kept, as the exact ``int`` it holds (see :func:`exact_int`).
    """
    plain = exact_int(value)
    if plain is None or plain < 0:
        raise InvalidArgumentError(
            f"{attribute.name} must be a non-negative integer, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, plain)


def seq_field(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` from 0 to :data:`MAX_SEQ` (``bool`` refused): a group's seq.

    No group has a negative seq or one past :data:`MAX_SEQ`, so a stored record naming one is
    damage, refused when it is decoded. An ``int`` subclass is kept as the exact ``int`` it holds.
    """
    seq = exact_int(value)
    if seq is None or not 0 <= seq <= MAX_SEQ:
        raise InvalidArgumentError(
            f"{attribute.name} must be a non-negative integer of at most {MAX_SEQ}, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, seq)


def seq_items(instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    """Each item an ``int`` from 0 to :data:`MAX_SEQ` (``bool`` refused): group seqs.

    For a tuple field (after :func:`int_tuple`): no group has a negative seq (nor one past
    :data:`MAX_SEQ`), so a stored record naming one is damage, refused when it is decoded.
    Subclasses are kept as the exact ints they hold.
    """
    plain = []
    for item in value:
        seq = exact_int(item)
        if seq is None or not 0 <= seq <= MAX_SEQ:
            raise InvalidArgumentError(
                f"{attribute.name} must hold integers from 0 to {MAX_SEQ}, got {shown_number(item)}"
            )
        plain.append(seq)
    if any(type(item) is not int for item in value):
        keep_exact(instance, attribute, value, tuple(plain))
