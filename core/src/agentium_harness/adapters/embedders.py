"""The built-in embedder: feature hashing of words and character trigrams (plugin name ``hashing``).

:class:`HashingEmbedder` needs no model, no download and no dependency: each
lower-cased word and each character trigram of a word (``"#sa", "sai",
"ail" …``, with ``#`` marking the word's edges) is hashed (CRC-32, stable
across processes and platforms) to one of ``dimension`` buckets with a sign,
and the counts, damped by ``1 + log(count)``, are the vector. Two texts are
similar when they share words or parts of words, so "sailboats" comes near
"sailing boat", which no stemmer joins. It is deterministic and fast (tens of
microseconds a text) and understands nothing: it is for tests, examples and
machines where no real model may run. For meaning, use a model embedder
(``agentium-embedder-minilm`` offline, or the OpenAI-compatible one in
``agentium-provider-openai``).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from typing import ClassVar, Final

import attrs

from .._errors import InvalidArgumentError
from .._ports._base import OpContext
from .._ports.embedder import Embedder, EmbedderCapabilities, EmbeddingModel
from .._ports.recall_args import checked_ctx
from .._validators import bounded_count
from ._stopwords import ENGLISH_STOPWORDS

__all__ = ["HashingEmbedder", "HashingEmbedderConfig"]

_WORD: Final = re.compile(r"\w+")


@attrs.frozen(slots=True)
class HashingEmbedderConfig:
    """Options of the hashing embedder: ``dimension`` (default 256, 16 to 4096)."""

    dimension: int = attrs.field(default=256, validator=bounded_count(minimum=16, ceiling=4096))


class HashingEmbedder(Embedder):
    """Deterministic, model-free embeddings of words and character trigrams (see the module docs)."""

    capabilities: ClassVar[EmbedderCapabilities] = EmbedderCapabilities(
        batch_embedding=True, health_check=True
    )
    max_batch = 256

    def __init__(self, config: HashingEmbedderConfig | None = None) -> None:
        self._config = config if config is not None else HashingEmbedderConfig()
        self._model = EmbeddingModel("agentium-hashing-v1", self._config.dimension)

    @property
    def model(self) -> EmbeddingModel:
        """``agentium-hashing-v1`` at the configured dimension."""
        return self._model

    def vector(self, text: str) -> list[float]:
        """The (unnormalized) vector of one text."""
        dim = self._model.dimension
        counts: dict[int, float] = {}
        for match in _WORD.finditer(text.lower()):
            word = match.group()
            if word in ENGLISH_STOPWORDS:
                continue  # function words make every text look alike
            features = [word]
            edged = f"#{word}#"
            features.extend(edged[i : i + 3] for i in range(max(1, len(edged) - 2)))
            for feature in features:
                h = zlib.crc32(feature.encode("utf-8", "surrogatepass"))
                bucket = h % dim
                sign = 1.0 if (h >> 31) & 1 == 0 else -1.0
                counts[bucket] = counts.get(bucket, 0.0) + sign
        out = [0.0] * dim
        for bucket, value in counts.items():
            out[bucket] = math.copysign(1.0 + math.log(abs(value)), value) if value else 0.0
        if not any(out):
            out[0] = 1.0  # a text with no word still has a direction (the same for all such texts)
        return out

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        """One vector per text, in order; pure computation, checked against ``ctx`` between texts.

        Raises :class:`InvalidArgumentError` when ``ctx`` is not an
        :class:`OpContext` or ``texts`` is not a sequence of strings (one bare
        string included); nothing is embedded.
        """
        checked_ctx(ctx, "embed").raise_if_expired("embed")
        if isinstance(texts, str | bytes | bytearray) or not isinstance(texts, Sequence):
            raise InvalidArgumentError(
                f"embed: texts must be a sequence of strings, got {type(texts).__name__}"
            )
        batch = list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise InvalidArgumentError(f"embed: texts[{i}] must be a string, got {type(text).__name__}")
        out: list[list[float]] = []
        for text in batch:
            ctx.raise_if_expired("embed")
            out.append(self.vector(str.__str__(text)))
        return out

    async def health(self, ctx: OpContext) -> str:
        """Embed one word (no I/O)."""
        checked_ctx(ctx, "embedder health").raise_if_expired("embedder health")
        self.vector("health")
        return f"hashing embedder ok: {self._model.key()}"
