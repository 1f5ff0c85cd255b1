"""The embedder port: text to vectors, for hybrid recall (lexical and vector candidates, fused).

An :class:`Embedder` turns a batch of texts into one vector each, in one
vector space named by its :class:`EmbeddingModel` (a model id and a
dimension). The engine is the only caller: it cuts every text to
:attr:`EmbeddingLimits.max_input_bytes`, sends at most
:attr:`EmbeddingLimits.max_batch` texts per call (and no more than the
adapter's own :attr:`Embedder.max_batch`), runs each call under its deadline
and checks everything that comes back (one vector per text, the declared
dimension, finite numbers, not all zero) before a vector reaches a recall
store. What passes is a :class:`Vector`: unit length, tagged with its model,
so a store can refuse to mix vectors of two models
(:class:`~agentium_harness._errors.EmbeddingModelMismatchError`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any, ClassVar, Final

import attrs

from .._errors import InvalidArgumentError
from .._validators import (
    bounded_count,
    bounded_duration,
    exact_int,
    identifier,
    keep_exact,
    plain_str,
    require_instance,
    shown_number,
)
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = [
    "MAX_DIMENSION",
    "Embedder",
    "EmbedderCapabilities",
    "EmbeddingLimits",
    "EmbeddingModel",
    "Vector",
]

#: Largest vector dimension accepted (the largest common embedding models use 3072 or 4096).
MAX_DIMENSION: Final = 8192


@attrs.frozen(slots=True)
class EmbedderCapabilities(Capabilities):
    """What an embedder declares.

    - ``batch_embedding`` (required): :meth:`Embedder.embed` takes a batch of
      texts and returns one vector per text, in order, each of the declared
      dimension.
    - ``health_check``: :meth:`Embedder.health`, a bounded probe that
      ``agentium check --probe`` shows.
    """

    METHODS: ClassVar[dict[str, str]] = {"batch_embedding": "embed", "health_check": "health"}
    REQUIRED: ClassVar[tuple[str, ...]] = ("batch_embedding",)

    batch_embedding: bool = False
    health_check: bool = False


def _dimension(instance: Any, attribute: attrs.Attribute[int], value: object) -> None:
    dimension = exact_int(value)  # an int subclass as its number: its own comparisons are not trusted
    if dimension is None or not 1 <= dimension <= MAX_DIMENSION:
        raise InvalidArgumentError(
            f"{attribute.name} must be an integer from 1 to {MAX_DIMENSION}, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, dimension)


@attrs.frozen(slots=True)
class EmbeddingModel:
    """A vector space: the model that made the vectors and their dimension.

    ``model`` is an identifier that changes whenever the vectors would (the
    model name and, where it matters, its revision or quantization), such as
    ``"all-MiniLM-L6-v2-onnx-int8"`` or ``"text-embedding-3-small"``. Two
    vectors are comparable only if their models are equal.
    """

    model: str = attrs.field(converter=plain_str, validator=identifier)
    dimension: int = attrs.field(validator=_dimension)

    def key(self) -> str:
        """``"<model>/<dimension>"``: how stores record the space their vectors are in."""
        return f"{self.model}/{self.dimension}"


def _finite(v: object) -> float:
    """``v`` as a finite float; :class:`InvalidArgumentError` for anything else (``bool`` and ``str`` too)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InvalidArgumentError(f"a vector holds numbers, got {type(v).__name__}")
    # The value itself, read past any __float__ a subclass defines (it could raise anything).
    try:
        f = float.__float__(v) if isinstance(v, float) else int.__float__(v)
    except OverflowError:  # an int past float's range
        raise InvalidArgumentError("a vector holds only finite numbers (no NaN or infinity)") from None
    if not math.isfinite(f):
        raise InvalidArgumentError("a vector holds only finite numbers (no NaN or infinity)")
    return f


def _unit_values(value: Iterable[float]) -> tuple[float, ...]:
    if isinstance(value, str | bytes | bytearray) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(f"a vector's values are a sequence of numbers, got {type(value).__name__}")
    # At most MAX_DIMENSION + 1 values are read: __attrs_post_init__ refuses any count but the model's.
    return tuple(_finite(v) for v in islice(iter(value), MAX_DIMENSION + 1))


def _a_model(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # Checked before the length check in __attrs_post_init__, which raised AttributeError on a str.
    require_instance(value, EmbeddingModel, "model")


@attrs.frozen(slots=True)
class Vector:
    """One checked, unit-length vector of ``model``'s space.

    Built by the engine from what an embedder returned (see
    :meth:`normalized`), never by an adapter: ``values`` has exactly
    ``model.dimension`` finite numbers and length 1 (to float32 precision), so
    a dot product of two vectors of one model is their cosine similarity.
    """

    # Checked first: given a str, the length check below raised AttributeError.
    model: EmbeddingModel = attrs.field(
        validator=lambda _i, _a, v: require_instance(v, EmbeddingModel, "model")
    )
    values: tuple[float, ...] = attrs.field(converter=_unit_values)

    def __attrs_post_init__(self) -> None:
        if len(self.values) != self.model.dimension:
            raise InvalidArgumentError(
                f"a vector of {self.model.key()} needs {self.model.dimension} values, got {len(self.values)}"
            )
        if not all(math.isfinite(v) for v in self.values):
            raise InvalidArgumentError("a vector holds only finite numbers (no NaN or infinity)")
        norm = math.sqrt(math.fsum(v * v for v in self.values))
        if abs(norm - 1.0) > 1e-3:
            raise InvalidArgumentError(
                f"a vector must have length 1, got {norm:.6f}; build it with Vector.normalized"
            )

    @classmethod
    def normalized(cls, model: EmbeddingModel, values: Sequence[float]) -> Vector:
        """``values`` scaled to length 1, checked; :class:`InvalidArgumentError` if that is impossible.

        Refused: the wrong number of values, a value that is not a real
        number (``bool`` included), NaN or infinity, and the zero vector
        (it has no direction).
        """
        model = require_instance(model, EmbeddingModel, "model")
        if isinstance(values, str | bytes | bytearray) or not hasattr(values, "__iter__"):
            raise InvalidArgumentError(
                f"a vector's values are a sequence of numbers, got {type(values).__name__}"
            )
        # Read to one past the dimension at most: what is iterated counts, not what len() claims.
        floats = [_finite(v) for v in islice(iter(values), model.dimension + 1)]
        if len(floats) != model.dimension:
            found = f"more than {model.dimension}" if len(floats) > model.dimension else str(len(floats))
            raise InvalidArgumentError(
                f"a vector of {model.key()} needs {model.dimension} values, got {found}"
            )
        norm = math.sqrt(math.fsum(f * f for f in floats))
        if norm == 0.0 or not math.isfinite(norm):
            # The squares under- or overflowed (values near 1e-160 or 1e160): scaled by the largest
            # magnitude first, the vector keeps its direction. Only all zeros has none.
            largest = max(abs(f) for f in floats)
            if largest == 0.0:
                raise InvalidArgumentError("a zero vector has no direction and cannot be compared")
            floats = [f / largest for f in floats]
            norm = math.sqrt(math.fsum(f * f for f in floats))
        return cls(model, tuple(f / norm for f in floats))

    def to_bytes(self) -> bytes:
        """The values as little-endian float32: how stores keep a vector (4 bytes per value)."""
        return struct.pack(f"<{len(self.values)}f", *self.values)

    @classmethod
    def from_bytes(cls, model: EmbeddingModel, data: bytes) -> Vector:
        """A vector of ``model`` read back from :meth:`to_bytes`; :class:`InvalidArgumentError` if damaged."""
        model = require_instance(model, EmbeddingModel, "model")
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) != 4 * model.dimension:
            raise InvalidArgumentError(f"stored vector is not {4 * model.dimension} bytes of {model.key()}")
        return cls.normalized(model, struct.unpack(f"<{model.dimension}f", bytes(data)))

    def dot(self, other: Vector) -> float:
        """The cosine similarity with ``other`` (same model, else :class:`InvalidArgumentError`)."""
        if other.model != self.model:
            raise InvalidArgumentError(
                f"cannot compare a vector of {self.model.key()} with one of {other.model.key()}"
            )
        return math.fsum(a * b for a, b in zip(self.values, other.values, strict=True))


@attrs.frozen(slots=True)
class EmbeddingLimits:
    """Bounds on every embedding call the engine makes (``[embedder.budget]``).

    - ``max_batch``: texts per call (the adapter's own ``max_batch`` may be lower).
    - ``max_input_bytes``: each text is cut to this many UTF-8 bytes, at a
      character boundary, before it is sent (a 1 MB query costs what 8 KiB does).
    - ``timeout_s``: one call's deadline. A query's embedding also gets at most
      half of what is left of the recall latency budget, so a hanging embedder
      leaves time for lexical discovery.
    - ``warmup_timeout_s``: the deadline of :meth:`Embedder.warm_up` when the
      runtime starts; past it the start goes on without it (a WARNING).
    """

    max_batch: int = attrs.field(default=32, validator=bounded_count(ceiling=4096))
    max_input_bytes: int = attrs.field(default=8192, validator=bounded_count(ceiling=1 << 20))
    timeout_s: float = attrs.field(default=10.0, validator=bounded_duration())
    warmup_timeout_s: float = attrs.field(default=10.0, validator=bounded_duration())


class Embedder:
    """Port for an embedding model. Declare ``capabilities`` and ``model``; implement :meth:`embed`.

    Optionally override :meth:`warm_up` to load a model ahead of the first query.
    """

    capabilities: ClassVar[EmbedderCapabilities]
    #: How many texts one :meth:`embed` call accepts at most; the engine never sends more.
    max_batch: int = 32

    @property
    def model(self) -> EmbeddingModel:
        """The vector space of every vector :meth:`embed` returns. Must not change while the adapter lives."""
        raise unsupported(self, "model")

    @port_stub
    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        """One vector per text, in order, each with ``model.dimension`` finite numbers.

        Texts are non-empty, valid Unicode and already cut to the engine's
        input bound; there are at most ``max_batch`` of them. Vectors need
        not be normalized (the engine scales them to length 1). Call
        ``ctx.raise_if_expired("embed")`` before starting and between
        backend requests; stop when ``ctx.signal`` is cancelled.

        Raises: ``OperationCancelledError`` when cancelled or past the
        deadline; the backend's error (a subclass of ``AgentiumError``) when
        it fails; ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "embed")

    async def warm_up(self, ctx: OpContext) -> None:
        """Get ready for the first :meth:`embed` now (load a model file, open a client); by default nothing.

        The runtime calls it once when it starts (``async with runtime`` or
        ``await runtime.start()``), under ``EmbeddingLimits.warmup_timeout_s``,
        so the first query does not pay for loading inside its recall latency
        budget. Optional: an adapter with nothing to load keeps this default.
        It must be safe to repeat and to skip: a warm-up that fails or times
        out is logged as a WARNING, the start goes on, and :meth:`embed` must
        still load what it needs itself. Call
        ``ctx.raise_if_expired("embedder warm-up")`` before starting.

        Raises: the backend's errors, or ``OperationCancelledError`` when
        cancelled or past the deadline (the runtime logs either, never raises it).
        """

    @port_stub
    async def health(self, ctx: OpContext) -> str:
        """Run a bounded health probe and describe the model. Declared by ``health_check``.

        Call ``ctx.raise_if_expired("embedder health")`` before probing.

        Raises: the backend's errors when unhealthy; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError`` when
        not declared.
        """
        raise unsupported(self, "health", "health_check")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself. Borrowed clients are never closed."""
