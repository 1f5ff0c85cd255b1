"""Embedding under the engine's bounds: hybrid recall's query vectors and the vectors it indexes.

An embedder is only ever called from here. :func:`embed_texts` cuts each
text to :attr:`EmbeddingLimits.max_input_bytes`, sends batches of at most
``min(limits.max_batch, embedder.max_batch)`` texts, runs each call under its
deadline through :meth:`.lifecycle.Ticket.call` (a call that hangs, even in a
worker thread, is walked away from at the deadline) and checks every answer
whole: one vector per text, each of the model's dimension, finite, not
zero. A batch that breaks any rule raises :class:`EmbeddingError` and none
of its vectors is used. What passes is a unit-length
:class:`~agentium_harness._ports.embedder.Vector` tagged with the model, so a
recall store can refuse to mix models.

Where vectors go: :func:`index_sources` embeds sources (archived groups
after an eviction commits, host documents, ``agentium recall rebuild``) and
hands them to the store's ``index_vectors``; :func:`embed_query` embeds a
recall query for ``discover_hybrid`` (see :mod:`.recall`). :func:`warm_embedder`
runs the embedder's ``warm_up`` when the runtime starts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from itertools import islice

import attrs

from .._errors import CapabilityError, EmbeddingError, InvalidArgumentError
from .._history import MessageGroup
from .._observe.logs import one_line
from .._observe.spans import current_span_event, error_type
from .._ports._base import OpContext, capabilities_of
from .._ports.embedder import Embedder, EmbeddingLimits, EmbeddingModel, Vector
from .._ports.recall import RecallCapabilities, RecallStore, SourceRef, SourceVector
from .._text import error_text
from .._validators import exact_int, shown_number
from .checks import check_adapter
from .lifecycle import Ticket

_log = logging.getLogger("agentium.engine.recall")

__all__ = [
    "Hybrid",
    "embed_query",
    "embed_texts",
    "embedding_text",
    "index_sources",
    "make_hybrid",
    "warm_embedder",
]


@attrs.frozen(slots=True)
class Hybrid:
    """What hybrid recall needs: the embedder, its bounds, and the model it declared at build time."""

    embedder: Embedder
    limits: EmbeddingLimits
    model: EmbeddingModel


def make_hybrid(embedder: Embedder, limits: EmbeddingLimits | None, recall: RecallStore | None) -> Hybrid:
    """Check an embedder and the recall store beside it at build time; :class:`CapabilityError` if unfit.

    Hybrid recall needs a recall store that declares ``vector_indexing`` and
    ``hybrid_discovery``; an embedder without a recall store has nothing to do.
    """
    check_adapter("embedder", embedder)
    if limits is not None and not isinstance(limits, EmbeddingLimits):
        raise InvalidArgumentError(f"embedding_limits must be EmbeddingLimits, got {type(limits).__name__}")
    if recall is None:
        raise CapabilityError(
            f"embedder {type(embedder).__name__} was given without a recall store: an embedder only "
            "serves hybrid recall; add a recall store that declares vector_indexing and hybrid_discovery, "
            "or leave the embedder out"
        )
    caps = capabilities_of(recall)
    if not isinstance(caps, RecallCapabilities) or not caps.hybrid:
        missing = [f for f in ("vector_indexing", "hybrid_discovery") if not getattr(caps, f, False)]
        raise CapabilityError(
            f"recall store {type(recall).__name__} does not declare {' and '.join(missing)}, which hybrid "
            "recall with an embedder requires: choose a recall store with vectors (the built-in 'sqlite' "
            "store has them), or leave the embedder out for lexical recall"
        )
    try:
        model = embedder.model
    except Exception as exc:
        raise CapabilityError(
            f"embedder {type(embedder).__name__} has no model ({error_text(exc)}); it must "
            "declare model = EmbeddingModel(model_id, dimension)"
        ) from exc
    if not isinstance(model, EmbeddingModel):
        raise CapabilityError(
            f"embedder {type(embedder).__name__}.model must be an EmbeddingModel, got {type(model).__name__}"
        )
    try:
        batch = getattr(embedder, "max_batch", None)
    except Exception as exc:  # a property that raises something other than AttributeError
        raise CapabilityError(
            f"embedder {type(embedder).__name__}.max_batch raised {error_text(exc)}; "
            "it must be an integer >= 1"
        ) from exc
    plain = exact_int(batch)  # an int subclass as its number: its own comparisons are not trusted
    if plain is None or plain < 1:
        raise CapabilityError(
            f"embedder {type(embedder).__name__}.max_batch must be an integer >= 1, got {shown_number(batch)}"
        )
    return Hybrid(embedder, limits or EmbeddingLimits(), model)


def _batch_size(hybrid: Hybrid) -> int:
    """Texts per call: the adapter's ``max_batch`` as it is now, checked again (it was at build time)."""
    try:
        batch = hybrid.embedder.max_batch
    except Exception as exc:  # a property that raises
        raise EmbeddingError(
            f"embedder {type(hybrid.embedder).__name__}.max_batch raised {error_text(exc)}"
        ) from exc
    plain = exact_int(batch)  # an int subclass as its number: its own comparisons are not trusted
    if plain is None or plain < 1:
        raise EmbeddingError(
            f"embedder {type(hybrid.embedder).__name__}.max_batch is now {shown_number(batch)}, not an "
            "integer >= 1; nothing was sent"
        )
    return min(hybrid.limits.max_batch, plain)


def _cut(text: str, max_bytes: int) -> str:
    """``text`` as a plain ``str`` of valid Unicode, cut to ``max_bytes`` of UTF-8 at a character boundary.

    The port promises adapters valid Unicode: a lone surrogate (which no UTF-8 encoder or JSON
    body takes) is dropped, whether or not the text is cut.
    """
    text = str.__str__(text)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", "ignore")


def embedding_text(group: MessageGroup) -> str:
    """The text a group is embedded as: its messages' contents, one per line.

    Roles are left out: every group has them, so they would only pull all
    vectors together.
    """
    return "\n".join(m.content for m in group.messages if m.content.strip())


def _checked(raw: object, batch: Sequence[str], model: EmbeddingModel, who: str) -> list[Vector]:
    try:
        return _read_vectors(raw, batch, model, who)
    except EmbeddingError:
        raise
    except Exception as exc:  # a hostile answer whose len(), iteration or tolist() raises
        raise EmbeddingError(
            f"{who} returned an answer that could not be read ({error_text(exc)}); the batch was dropped"
        ) from exc


def _read_vectors(raw: object, batch: Sequence[str], model: EmbeddingModel, who: str) -> list[Vector]:
    if isinstance(raw, str | bytes) or not hasattr(raw, "__len__") or not hasattr(raw, "__iter__"):
        raise EmbeddingError(f"{who} returned {type(raw).__name__}, not a sequence of vectors; none was used")
    # What iteration yields is what is used, never what __len__ claims, and it is read to one past
    # the batch at most: an answer that iterates without end cannot hold the event loop.
    items = list(islice(iter(raw), len(batch) + 1))
    if len(items) != len(batch):
        count = f"more than {len(batch)}" if len(items) > len(batch) else str(len(items))
        raise EmbeddingError(
            f"{who} returned {count} vectors for {len(batch)} texts; the batch was dropped whole"
        )
    vectors: list[Vector] = []
    for i, item in enumerate(items):
        values = item.tolist() if callable(getattr(item, "tolist", None)) else item
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise EmbeddingError(f"{who} returned {type(item).__name__} as vector {i}; the batch was dropped")
        # Copied the same way, to one past the dimension: a list subclass cannot lie about its length.
        copied = list(islice(iter(values), model.dimension + 1))
        if len(copied) != model.dimension:
            found = f"more than {model.dimension}" if len(copied) > model.dimension else str(len(copied))
            raise EmbeddingError(
                f"{who} returned a vector of dimension {found} where its model {model.key()} "
                f"declares {model.dimension}; the batch was dropped"
            )
        try:
            vectors.append(Vector.normalized(model, copied))
        except InvalidArgumentError as exc:
            raise EmbeddingError(
                f"{who} returned an unusable vector {i} ({exc}); the batch was dropped"
            ) from exc
    return vectors


def _embed_call(
    embedder: Embedder, batch: list[str]
) -> Callable[[OpContext], Awaitable[Sequence[Sequence[float]]]]:
    return lambda ctx: embedder.embed(batch, ctx)


def _index_call(store: RecallStore, entries: list[SourceVector]) -> Callable[[OpContext], Awaitable[int]]:
    return lambda ctx: store.index_vectors(entries, ctx)


async def embed_texts(
    ticket: Ticket, hybrid: Hybrid, texts: Sequence[str], *, timeout_s: float | None = None
) -> list[Vector]:
    """One checked vector per text, in order, in bounded batches; :class:`EmbeddingError` on any fault.

    Each call has ``timeout_s`` (default ``hybrid.limits.timeout_s``); a call
    that raises, hangs or answers badly fails the whole request.
    """
    limits = hybrid.limits
    size = _batch_size(hybrid)
    cut = [_cut(t, limits.max_input_bytes) for t in texts]
    if any(not t.strip() for t in cut):
        raise EmbeddingError("an empty text cannot be embedded; nothing was sent")
    who = f"embedder {type(hybrid.embedder).__name__}"
    timeout = limits.timeout_s if timeout_s is None else min(timeout_s, limits.timeout_s)
    out: list[Vector] = []
    for start in range(0, len(cut), size):
        batch = cut[start : start + size]
        try:
            raw = await ticket.call(
                "embed", _embed_call(hybrid.embedder, batch), timeout_s=timeout, store=False
            )
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"{who} failed: {error_text(exc)}") from exc
        out.extend(_checked(raw, batch, hybrid.model, who))
    return out


async def warm_embedder(ticket: Ticket, hybrid: Hybrid) -> str | None:
    """Run the embedder's ``warm_up`` under ``warmup_timeout_s``; why it failed (logged), or ``None``.

    Never raises: a warm-up that fails or times out only means the first
    query loads the model itself, as it would without one. An embedder that
    keeps the port's default (nothing to load) is not called at all.
    """
    embedder = hybrid.embedder
    warm = getattr(type(embedder), "warm_up", None)
    if warm is None or warm is Embedder.warm_up or not callable(warm):
        return None
    try:
        await ticket.call(
            "embedder warm-up", lambda ctx: embedder.warm_up(ctx), timeout_s=hybrid.limits.warmup_timeout_s
        )
    except Exception as exc:  # the adapter's own error, a timeout or a bad return: all only degrade
        why = (
            f"embedder {type(embedder).__name__} warm-up failed ({error_text(exc)}); "
            "the first query loads it itself, within its recall budget"
        )
        # The error's type only: its text is the adapter's, and the records carry no free text
        # unless the host opts in (docs/observability.md); the diagnostic returned has it whole.
        _log.warning(
            "embedder %s warm-up failed (%s); the first query loads it itself, within its recall budget",
            one_line(type(embedder).__name__),  # the adapter's to choose: escaped, one record one line
            error_type(exc),
        )
        return why
    return None


async def embed_query(ticket: Ticket, hybrid: Hybrid, query: str, timeout_s: float) -> Vector:
    """The checked vector of one recall query (already cut to ``max_query_bytes``), within ``timeout_s``."""
    (vector,) = await embed_texts(ticket, hybrid, [query], timeout_s=timeout_s)
    return vector


async def index_sources(
    ticket: Ticket, hybrid: Hybrid, store: RecallStore, sources: Sequence[tuple[SourceRef, str]]
) -> int:
    """Embed ``(ref, text)`` pairs and store the vectors with ``store.index_vectors``; how many were stored.

    Sources whose text is blank within its first ``max_input_bytes`` (all
    that would be embedded) are skipped: nothing to embed, and one of them
    must not fail the others of its batch. Raises :class:`EmbeddingError`
    when embedding fails (nothing stored) and what the store raises
    (``EmbeddingModelMismatchError`` among them).
    """
    limit = hybrid.limits.max_input_bytes
    wanted = [(ref, text) for ref, text in sources if _cut(text, limit).strip()]
    if not wanted:
        return 0
    stored = 0
    step = _batch_size(hybrid)
    # One store write per embedding batch: memory stays bounded by the batch, and what was
    # embedded before a failure is kept.
    for start in range(0, len(wanted), step):
        part = wanted[start : start + step]
        vectors = await embed_texts(ticket, hybrid, [text for _, text in part])
        entries = [SourceVector(ref, vector) for (ref, _), vector in zip(part, vectors, strict=True)]
        count = await ticket.call("recall index vectors", _index_call(store, entries))
        stored += _stored_count(count, len(entries), store)
    return stored


def _stored_count(count: object, sent: int, store: RecallStore) -> int:
    """What ``index_vectors`` said it stored, if that is a count from 0 to ``sent``; else 0 and a WARNING.

    The vectors were handed over and the call returned, so they may well be stored: a bad
    count (a store that forgot its ``return`` answers ``None``) is not a failure to report as
    one, and must not raise a bare ``TypeError`` after the write.
    """
    if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= sent:
        return int(count)
    _log.warning(
        "recall store %s: index_vectors returned %s for %d vectors, not a count from 0 to %d; "
        "counted as 0 stored",
        one_line(type(store).__name__),  # class names the adapter chose: escaped, one record one line
        one_line(type(count).__name__),
        sent,
        sent,
    )
    # On the span of the write it is part of (an index_document's, a commit's recall indexing).
    current_span_event("agentium.recall.vectors_uncounted", {"agentium.recall.vectors": sent})
    return 0
