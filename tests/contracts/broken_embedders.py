"""The built-in hashing embedder and embedders with one realistic bug each, run through EmbedderContract.

``test_embedder_contracts.py`` runs this file in a pytester session. The
reference is the built-in :class:`HashingEmbedder` (it passes the whole
suite); each broken one wraps it and changes one behaviour.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

import anyio
import anyio.lowlevel
import pytest

from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.plugin_api import Embedder, EmbedderCapabilities, EmbeddingModel, OpContext
from agentium_harness.testing import EmbedderContract

pytestmark = pytest.mark.anyio

CAPS = EmbedderCapabilities(batch_embedding=True, health_check=True)


class Wrapper(Embedder):
    """Delegates to a hashing embedder; subclasses change one behaviour."""

    capabilities: ClassVar[EmbedderCapabilities] = CAPS
    max_batch = 32

    def __init__(self) -> None:
        self.inner = HashingEmbedder()

    @property
    def model(self) -> EmbeddingModel:
        return self.inner.model

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return await self.inner.embed(texts, ctx)

    async def health(self, ctx: OpContext) -> str:
        return await self.inner.health(ctx)


class InheritedCaps(Wrapper):
    pass  # capabilities only on the base class


class WrongDimension(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return [list(v)[:-1] for v in await super().embed(texts, ctx)]  # one value short


class ReturnsNaN(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        out = [list(v) for v in await super().embed(texts, ctx)]
        for v in out:
            v[0] = float("nan")
        return out


class TooManyVectors(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        out = list(await super().embed(texts, ctx))
        return [*out, out[-1]] if len(texts) > 1 else out  # a duplicated last vector in a batch


class TooFewVectors(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        out = list(await super().embed(texts, ctx))
        return out[:-1] if len(texts) > 1 else out  # drops the last vector of a batch


class Rotated(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        out = list(await super().embed(texts, ctx))
        return out[1:] + out[:1]  # vectors out of text order (a sort by length, say)


class Noisy(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return [[x + random.uniform(-0.5, 0.5) for x in v] for v in await super().embed(texts, ctx)]


class Constant(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        ctx.raise_if_expired("embed")
        return [[1.0] * self.model.dimension for _ in texts]


class OverstatesItsBatch(Wrapper):
    capabilities = CAPS
    max_batch = 64

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return await super().embed(texts[:16], ctx)  # serves 16, declares 64


class IgnoresCancellation(Wrapper):
    capabilities = CAPS

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return await self.inner.embed(texts, OpContext.with_timeout(60.0))


class WarmUpIgnoresCancellation(Wrapper):
    capabilities = CAPS
    warmed = 0

    async def warm_up(self, ctx: OpContext) -> None:
        self.warmed += 1  # loads whatever its context says: a shutdown cannot stop it


class DriftingModel(Wrapper):
    capabilities = CAPS
    calls = 0

    @property
    def model(self) -> EmbeddingModel:
        return EmbeddingModel(f"drift-{self.calls}", self.inner.model.dimension)

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        self.calls += 1
        return await super().embed(texts, ctx)


class BrokenHealth(Wrapper):
    capabilities = CAPS

    async def health(self, ctx: OpContext) -> str:
        await anyio.lowlevel.checkpoint()
        raise ConnectionError("model server unreachable")


class TestReferenceEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return HashingEmbedder()


def _case(cls: type[Embedder]) -> type[EmbedderContract]:
    class Case(EmbedderContract):
        @pytest.fixture
        def embedder(self) -> Embedder:
            return cls()

    return Case


TestInheritedCaps = _case(InheritedCaps)
TestWrongDimension = _case(WrongDimension)
TestReturnsNaN = _case(ReturnsNaN)
TestTooManyVectors = _case(TooManyVectors)
TestTooFewVectors = _case(TooFewVectors)
TestRotated = _case(Rotated)
TestNoisy = _case(Noisy)
TestConstant = _case(Constant)
TestOverstatesItsBatch = _case(OverstatesItsBatch)
TestIgnoresCancellation = _case(IgnoresCancellation)
TestWarmUpIgnoresCancellation = _case(WarmUpIgnoresCancellation)
TestDriftingModel = _case(DriftingModel)
TestBrokenHealth = _case(BrokenHealth)
