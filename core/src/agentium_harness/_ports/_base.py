"""Pieces every port shares: the operation context and the capability plumbing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import attrs

from .._errors import InvalidArgumentError
from .._validators import exact_number, shown_number

__all__ = [
    "CancelSignal",
    "capabilities_of",
    "unsupported",
    "Capabilities",
    "OpContext",
    "before_cancel",
    "is_port_stub",
    "port_stub",
]

F = TypeVar("F", bound=Callable[..., Any])

_new = object.__new__
_set = object.__setattr__

# Past this many seconds a deadline is no longer a float time.monotonic() can be added to exactly.
_MAX_SECONDS = 2.0**53


def _seconds(value: object) -> float:
    """``value`` as seconds for a deadline; NaN, a ``bool``, a non-number or a huge int is refused."""
    seconds = exact_number(value)
    if seconds is None or seconds != seconds or (type(seconds) is int and abs(seconds) > _MAX_SECONDS):
        # A nan deadline never expired (every comparison with it is false), True meant one
        # second, and "5" or 2**2000 raised TypeError or OverflowError from the addition.
        raise InvalidArgumentError(
            f"seconds must be a number of seconds (not nan), got {shown_number(value)}"
        )
    return float(seconds)


def port_stub(func: F) -> F:
    """Mark a port method as the port's default stub for an optional capability.

    Load-time validation refuses an adapter that declares the matching
    capability while still inheriting this stub (it declared what it did not
    implement).
    """
    func.__agentium_stub__ = True  # type: ignore[attr-defined]
    return func


def is_port_stub(obj: object) -> bool:
    """True if ``obj`` is (or wraps) a method marked with :func:`port_stub`."""
    target = getattr(obj, "__func__", obj)
    return bool(getattr(target, "__agentium_stub__", False))


class CancelSignal:
    """A cancellation flag an adapter checks during long work (R12, R13).

    The runtime also cancels through anyio cancel scopes; the signal lets an
    adapter that runs blocking work in a thread notice cancellation and stop
    backend work between steps.

    A signal may have a ``parent`` (the whole admitted operation: cancelling a
    run cancels every call it makes) and a ``deadline`` on the
    :func:`time.monotonic` clock. Past the deadline the signal reads as
    cancelled with reason ``"deadline passed"`` even if nobody called
    :meth:`cancel`, so a worker thread sees the deadline at the moment it
    passes, not when the event loop gets round to it.
    """

    __slots__ = ("_cancelled", "_deadline", "_parent", "_reason")

    def __init__(self, *, parent: CancelSignal | None = None, deadline: float | None = None) -> None:
        self._cancelled = False
        self._reason = ""
        self._parent = parent
        self._deadline = deadline

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called, the parent was cancelled or the deadline passed."""
        if self._cancelled:
            return True
        if self._parent is not None and self._parent.cancelled:
            self.cancel(self._parent.reason)
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.cancel("deadline passed")
            return True
        return False

    @property
    def reason(self) -> str:
        """Why it was cancelled, or an empty string."""
        return self._reason

    def cancel(self, reason: str = "cancelled") -> None:
        """Request cancellation. Idempotent: the first reason is kept."""
        if not self._cancelled:
            self._cancelled = True
            self._reason = reason

    def child(self, *, deadline: float | None = None) -> CancelSignal:
        """A signal cancelled with this one, and also by its own ``deadline``."""
        return CancelSignal(parent=self, deadline=deadline)


@attrs.frozen(slots=True)
class OpContext:
    """What every port operation receives (R12).

    ``deadline`` is on the :func:`time.monotonic` clock; ``remaining_bytes``
    and ``remaining_tokens`` are the caller's remaining budgets (``None``:
    unbounded for this operation). Adapters must stop when the signal is
    cancelled or the deadline has passed, and must not return more than the
    remaining budgets allow — the runtime checks, and reports a breach as a
    contract violation.
    """

    signal: CancelSignal = attrs.field(factory=CancelSignal)
    deadline: float | None = None
    remaining_bytes: int | None = None
    remaining_tokens: int | None = None

    @classmethod
    def unbounded(cls) -> OpContext:
        """A context with a fresh signal and no deadline or budgets."""
        return cls()

    @classmethod
    def with_timeout(
        cls,
        seconds: float,
        *,
        parent: CancelSignal | None = None,
        remaining_bytes: int | None = None,
        remaining_tokens: int | None = None,
    ) -> OpContext:
        """A context whose deadline is ``seconds`` from now; its signal follows ``parent`` and it.

        ``seconds`` may be 0 or negative (a context already expired), or ``inf`` (no deadline);
        NaN, a ``bool`` or anything but a number is :class:`InvalidArgumentError`.
        """
        # The common case (a float or a modest int) is checked inline: every adapter call makes one.
        if not (
            (type(seconds) is float and seconds == seconds)
            or (type(seconds) is int and -_MAX_SECONDS <= seconds <= _MAX_SECONDS)
        ):
            seconds = _seconds(seconds)
        deadline = time.monotonic() + seconds
        if cls is OpContext:
            # Every adapter call makes one: set the four fields directly, which is what the attrs
            # ``__init__`` of this frozen class does (no validators, no converters), at half its cost.
            ctx = _new(cls)
            _set(ctx, "signal", CancelSignal(parent=parent, deadline=deadline))
            _set(ctx, "deadline", deadline)
            _set(ctx, "remaining_bytes", remaining_bytes)
            _set(ctx, "remaining_tokens", remaining_tokens)
            return ctx
        return cls(
            signal=CancelSignal(parent=parent, deadline=deadline),
            deadline=deadline,
            remaining_bytes=remaining_bytes,
            remaining_tokens=remaining_tokens,
        )

    @property
    def expired(self) -> bool:
        """True if cancelled or past the deadline."""
        signal = self.signal
        if signal.cancelled:
            return True
        # A deadline the signal carries too (``with_timeout``) was just checked by it.
        deadline = self.deadline
        return deadline is not None and deadline != signal._deadline and time.monotonic() >= deadline

    def raise_if_expired(self, operation: str) -> None:
        """Raise :class:`~agentium_harness._errors.OperationCancelledError` if cancelled or past the deadline.

        Adapters call this before starting work (and between steps where they
        can), so refused work writes nothing.
        """
        signal = self.signal
        if signal.cancelled:
            from .._errors import OperationCancelledError  # errors must stay importable without ports

            reason = signal.reason or "cancelled"
            raise OperationCancelledError(
                f"{operation} refused: the operation was cancelled ({reason})", reason
            )
        # What ``expired`` adds to the signal's own answer, without asking the signal twice.
        deadline = self.deadline
        if deadline is not None and deadline != signal._deadline and time.monotonic() >= deadline:
            # Imported only to raise: an import statement on every check costs more than the check.
            from .._errors import OperationCancelledError

            raise OperationCancelledError(f"{operation} refused: its deadline has passed", "deadline passed")

    def time_left(self) -> float | None:
        """Seconds to the deadline (never negative), or ``None``."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())


#: How long before its deadline an adapter's own wait ends (at most a fifth of the time left):
#: see :func:`before_cancel`.
CANCEL_MARGIN_S = 0.05


def before_cancel(left: float) -> float:
    """How long an adapter's own wait may last, ``left`` seconds before its call's deadline.

    The engine cancels an adapter call at its deadline. A wait whose end the
    adapter reports itself (a write's lost reply settled, a COMMIT's answer
    awaited) and that is bounded by the same instant races that
    cancellation: on a loaded machine the cancellation wins and the
    adapter's own outcome (its error, WARNING and span event) is lost. Such a
    wait ends ``CANCEL_MARGIN_S`` (50 ms, or a fifth of ``left`` if less)
    before the deadline; never negative.
    """
    left = max(0.0, left)
    return left - min(CANCEL_MARGIN_S, left / 5)


class Capabilities:
    """Marker base of every kind's frozen capability class.

    Subclasses are frozen attrs classes of boolean flags. ``METHODS`` maps a
    flag to the adapter method (or ``"session:<name>"`` for the recall
    session class) that must be implemented when the flag is declared.
    ``REQUIRED`` lists flags an adapter of the kind must declare true.
    """

    METHODS: ClassVar[dict[str, str]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def __attrs_post_init__(self) -> None:
        # Every flag is a real bool: ``1`` or ``"yes"`` would pass ``if caps.erasure`` here and be
        # read otherwise by a plugin or a config check, so what is declared must be unambiguous.
        for field in attrs.fields(type(self)):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if not isinstance(value, bool):
                from .._errors import InvalidArgumentError  # errors stays importable without ports

                raise InvalidArgumentError(
                    f"{type(self).__name__}.{field.name} must be True or False, got {value!r}"
                )

    def declared(self) -> dict[str, bool]:
        """The flags as a plain dict."""
        return {a.name: bool(getattr(self, a.name)) for a in attrs.fields(type(self))}  # type: ignore[arg-type]


def unsupported(adapter: object, method: str, flag: str | None = None) -> Exception:
    """The error a port stub raises: an :class:`~agentium_harness._errors.UnsupportedOperationError`.

    ``flag`` names the capability that declares the method, when it is optional.
    """
    from .._errors import UnsupportedOperationError  # errors stays importable without ports

    why = f"it does not declare {flag!r}" if flag else "it does not implement it"
    return UnsupportedOperationError(f"{type(adapter).__name__}.{method}() is not available: {why}")


def capabilities_of(adapter: object) -> Capabilities | None:
    """What ``adapter`` declares: its ``instance_capabilities`` when set, else its class's ``capabilities``.

    A configurable adapter's class declares the most any instance can do
    (checked when it is registered); an instance built from a config that
    turns something off may narrow it by setting ``instance_capabilities``
    (checked when a runtime is built: same class of flags, none on that the
    class leaves off). The engine and the contract suites read this, so a
    test runs for what the instance really does.
    """
    own = getattr(adapter, "instance_capabilities", None)
    if isinstance(own, Capabilities):
        return own
    declared = getattr(type(adapter), "capabilities", None)
    return declared if isinstance(declared, Capabilities) else None
