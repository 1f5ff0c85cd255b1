"""``MiniLMEmbedder.health``: the probe's vector is checked, so a model that computes nonsense is unhealthy.

The probe used to embed one word and report ``ok`` whatever came back. The
onnxruntime session is replaced here by one that answers a chosen array
(no inference), after the real model has loaded once for the module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from agentium_embedder_minilm import MiniLMEmbedder
from agentium_harness import EmbeddingError, OpContext

pytestmark = pytest.mark.anyio

#: Loaded once for the module (the model takes a second to load); its session is swapped per test.
SHARED = MiniLMEmbedder()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Answering:
    """Stands in for the onnxruntime session: every token's hidden state is ``value``, ``width`` wide."""

    def __init__(self, value: float, width: int = 384) -> None:
        self.value = value
        self.width = width

    def run(self, outputs: object, feeds: dict[str, Any]) -> list[Any]:
        rows, tokens = feeds["input_ids"].shape
        return [np.full((rows, tokens, self.width), self.value, dtype=np.float32)]


@pytest.fixture
async def model() -> AsyncIterator[Any]:
    """The shared embedder's loaded model; its real session is put back after the test."""
    await SHARED.embed(["load the model"], OpContext.with_timeout(60.0))
    loaded = SHARED._model()
    real = loaded.session
    yield loaded
    loaded.session = real


async def test_a_sound_model_is_healthy(model: Any) -> None:
    assert (await SHARED.health(OpContext.with_timeout(30.0))).startswith("minilm ok: ")


@pytest.mark.parametrize(
    ("session", "reason"),
    [
        (_Answering(float("nan")), "finite"),
        (_Answering(float("inf")), "finite"),
        (_Answering(0.0), "zero vector"),
        (_Answering(0.5, width=10), "needs 384 values"),
        (_Answering(1e4), "has length"),  # finite, but about 2e5 long: nothing the model gives
        (_Answering(1e-6), "has length"),
    ],
)
async def test_a_bad_probe_vector_is_unhealthy(model: Any, session: _Answering, reason: str) -> None:
    model.session = session
    with pytest.raises(EmbeddingError, match=f"health probe.*{reason}"):
        await SHARED.health(OpContext.with_timeout(30.0))
