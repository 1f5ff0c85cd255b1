"""Scoring stored vectors against a query vector (pure functions, no I/O), shared by recall stores.

Stores keep vectors as little-endian float32 blobs of unit length
(:meth:`~agentium_harness._ports.embedder.Vector.to_bytes`), so a dot
product is their cosine similarity. NumPy scores them when it is installed
(the offline embedder brings it); plain Python otherwise, about ten times
slower (docs/recall.md, "The cost of hybrid recall").
"""

from __future__ import annotations

import functools
import importlib
import math
import operator
from array import array
from collections.abc import Sequence
from typing import Any

from .._ports.embedder import Vector
from .._validators import require_instance

__all__ = ["cosine_scores"]


@functools.cache
def _numpy() -> Any:
    """NumPy if it is installed (the offline embedder brings it), else ``None``: scoring falls back."""
    try:
        return importlib.import_module("numpy")
    except ImportError:  # pragma: no cover - exercised where NumPy is absent
        return None


def cosine_scores(query: Vector, blobs: Sequence[bytes]) -> list[float]:
    """The dot product of ``query`` with each stored unit vector (their cosine similarity).

    A blob of the wrong size (a damaged row) scores ``-inf`` and so is never
    returned. NumPy scores a few thousand 384-value vectors in about a
    millisecond; plain Python takes tens of milliseconds (see docs/recall.md).
    """
    size = 4 * require_instance(query, Vector, "query").model.dimension
    np = _numpy()
    good = [i for i, b in enumerate(blobs) if isinstance(b, bytes) and len(b) == size]
    scores = [-math.inf] * len(blobs)
    if not good:
        return scores
    if np is not None:
        matrix = np.frombuffer(b"".join(blobs[i] for i in good), dtype="<f4").reshape(len(good), -1)
        values = matrix @ np.asarray(query.values, dtype=np.float32)
        for i, value in zip(good, values.tolist(), strict=True):
            scores[i] = float(value) if math.isfinite(value) else -math.inf
        return scores
    q = array("f", query.values)
    mul = operator.mul
    for i in good:
        v = array("f")
        v.frombytes(blobs[i])
        value = sum(map(mul, q, v))
        scores[i] = value if math.isfinite(value) else -math.inf
    return scores
