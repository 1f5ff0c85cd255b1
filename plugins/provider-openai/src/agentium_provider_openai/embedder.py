"""An OpenAI-compatible embedder (``POST /v1/embeddings``): the ``openai`` embedder for hybrid recall.

It talks to OpenAI, or any server speaking the same API (vLLM, Ollama,
llama.cpp, LiteLLM, Text Embeddings Inference), through the official
``openai`` client, with the provider's own transport: the key comes from
the variable ``api_key_env`` names and is never shown; each attempt is
bounded by ``timeout_s`` and the operation's deadline; retryable failures
(429, 5xx, connection errors, an attempt's timeout) are retried at most
``max_retries`` times with capped backoff; the body is read chunk by chunk
and refused past ``max_reply_bytes``; JSON is decoded strictly.

One request embeds one batch (at most ``max_batch`` texts; the engine never
sends more). The answer must hold exactly one embedding per text, each
``index`` once, each a list of ``dimension`` finite numbers; anything else
is an :class:`OpenAIEmbeddingReplyError` and nothing of it is used. The
vectors' model is ``model`` at ``dimension``: configure the dimension the
model produces (1536 for ``text-embedding-3-small``, 768 for
``nomic-embed-text``…), or set ``request_dimensions = true`` to ask a model
that supports it (OpenAI's ``text-embedding-3-*``) for that many.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from agentium_harness.plugin_api import (
    Embedder,
    EmbedderCapabilities,
    EmbeddingModel,
    InvalidArgumentError,
    InvalidJSONError,
    OpContext,
    bounded_count,
    bounded_duration,
    decode_json,
)

from ._bodies import ASKED_CODINGS
from .config import (
    DEFAULT_BASE_URL,
    MAX_REPLY_BYTES_CEILING,
    OpenAIProviderConfig,
    check_base_url,
    check_env_name,
    check_header_id,
    check_model,
    redact_url,
)
from .errors import OpenAIEmbeddingReplyError
from .provider import OpenAIProvider
from .wire import holds_lone_surrogate

__all__ = ["OpenAIEmbedder", "OpenAIEmbedderConfig"]

_seconds = bounded_duration()


@attrs.frozen(slots=True)
class OpenAIEmbedderConfig:
    """Options of the OpenAI-compatible embedder (``[embedder.options]``).

    Checked when the config is loaded, each at its key: ``model``,
    ``base_url`` and ``api_key_env`` as for the provider.

    - ``model`` (required): the embedding model (``text-embedding-3-small``,
      ``nomic-embed-text`` on Ollama, ``BAAI/bge-small-en-v1.5`` on vLLM…).
    - ``dimension`` (required): how many values each vector has, 1 to 8192.
    - ``request_dimensions``: send ``dimensions`` with the request (only for
      models that accept it; default false).
    - ``base_url``, ``api_key_env``, ``organization``, ``project``,
      ``timeout_s``, ``max_retries``, ``retry_backoff_s``,
      ``retry_backoff_max_s``, ``probe_timeout_s``: as for the provider.
    - ``max_batch``: texts per request (default 64, at most 2048, OpenAI's limit).
    - ``max_reply_bytes``: the largest answer read (default 64 MiB).
    """

    # The provider's own checks, so a config is refused when it is loaded
    # (``agentium check`` without ``--probe``), not only when the embedder is built.
    model: str = attrs.field(validator=check_model)
    dimension: int = attrs.field(validator=bounded_count(ceiling=8192))
    request_dimensions: bool = False
    base_url: str = attrs.field(default=DEFAULT_BASE_URL, validator=check_base_url, repr=redact_url)
    api_key_env: str | None = attrs.field(default="OPENAI_API_KEY", validator=check_env_name)
    organization: str | None = attrs.field(default=None, validator=check_header_id)
    project: str | None = attrs.field(default=None, validator=check_header_id)
    timeout_s: float = attrs.field(default=30.0, validator=_seconds)
    max_retries: int = attrs.field(default=2, validator=bounded_count(minimum=0, ceiling=10))
    retry_backoff_s: float = attrs.field(default=0.5, validator=_seconds)
    retry_backoff_max_s: float = attrs.field(default=8.0, validator=_seconds)
    probe_timeout_s: float = attrs.field(default=5.0, validator=_seconds)
    max_batch: int = attrs.field(default=64, validator=bounded_count(ceiling=2048))
    max_reply_bytes: int = attrs.field(
        default=64 * 1024 * 1024, validator=bounded_count(minimum=1024, ceiling=MAX_REPLY_BYTES_CEILING)
    )

    def transport(self) -> OpenAIProviderConfig:
        """The provider options that carry the connection, retries and reply bound (validated there)."""
        return OpenAIProviderConfig(
            model=self.model,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            organization=self.organization,
            project=self.project,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            retry_backoff_s=self.retry_backoff_s,
            retry_backoff_max_s=self.retry_backoff_max_s,
            probe_timeout_s=self.probe_timeout_s,
            max_reply_bytes=self.max_reply_bytes,
        )


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (see the module docs).

    Building it does no I/O (it checks the options and reads the key from
    the environment); it connects on first use and closes its own client in
    :meth:`aclose`.
    """

    capabilities: ClassVar[EmbedderCapabilities] = EmbedderCapabilities(
        batch_embedding=True, health_check=True
    )

    def __init__(self, config: OpenAIEmbedderConfig, *, environ: Mapping[str, str] | None = None) -> None:
        if not isinstance(config, OpenAIEmbedderConfig):
            raise InvalidArgumentError(f"config must be an OpenAIEmbedderConfig, got {type(config).__name__}")
        self._config = config
        self._model = EmbeddingModel(config.model, config.dimension)
        self.max_batch = config.max_batch
        self._transport = OpenAIProvider(
            config.transport(), environ=os.environ if environ is None else environ
        )
        self._calls = self._transport.calls()

    @property
    def model(self) -> EmbeddingModel:
        """The configured model at the configured dimension."""
        return self._model

    @property
    def config(self) -> OpenAIEmbedderConfig:
        """The options this embedder was built with."""
        return self._config

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self._config.model!r}, base_url={redact_url(self._config.base_url)!r})"

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        """One vector per text, in order, from one request (retried as the options say).

        Raises :class:`InvalidArgumentError` when ``texts`` is not a sequence of
        strings, or one is not valid Unicode text (a lone surrogate); nothing is sent.
        """
        ctx.raise_if_expired("embed")
        batch = list(texts) if not isinstance(texts, str | bytes) else None
        if batch is None or not all(isinstance(text, str) for text in batch):
            # Checked before sending: bytes or None would reach the server as JSON it refuses, or worse.
            raise InvalidArgumentError("texts must be a sequence of strings")
        bad = next((i for i, text in enumerate(batch) if holds_lone_surrogate(text)), None)
        if bad is not None:
            # The client's JSON encoder would raise a bare UnicodeEncodeError; the text is not quoted.
            raise InvalidArgumentError(
                f"texts[{bad}] is not valid Unicode text (it holds a lone surrogate); nothing was sent"
            )
        if not batch:
            return []
        calls = self._calls
        client = await calls.client(ctx, "embed")
        optional: dict[str, Any] = (
            {"dimensions": self._config.dimension} if self._config.request_dimensions else {}
        )

        async def send(timeout: float) -> list[list[float]]:  # noqa: ASYNC109  # the client's own bound
            async with client.embeddings.with_streaming_response.create(
                model=self._config.model,
                input=batch,
                encoding_format="float",
                timeout=timeout,
                extra_headers=ASKED_CODINGS,
                **optional,
            ) as raw:
                data = await calls.read_capped(raw.http_response, "the embeddings")
            return self._parse(data, len(batch))

        return await calls.bounded(ctx, "embed", lambda: calls.attempts(ctx, "embed", send))

    def _parse(self, data: bytes, count: int) -> list[list[float]]:
        where = self._calls.where()
        try:
            body = decode_json(data, max_bytes=max(len(data), 1))
        except InvalidJSONError as exc:
            # from None: the decoder's reason may quote the body (a repeated key), scrubbed here only.
            raise OpenAIEmbeddingReplyError(
                f"the server at {where} answered with no valid JSON ({self._calls.scrub(exc.reason)})"
            ) from None
        items = body.get("data") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise OpenAIEmbeddingReplyError(f"the server at {where} sent no 'data' list of embeddings")
        if len(items) != count:
            raise OpenAIEmbeddingReplyError(
                f"the server at {where} sent {len(items)} embeddings for {count} texts; nothing was used"
            )
        vectors: list[list[float] | None] = [None] * count
        for item in items:
            index = item.get("index") if isinstance(item, dict) else None
            values = item.get("embedding") if isinstance(item, dict) else None
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                shown = repr(index) if isinstance(index, int) else self._calls.shown(index)
                raise OpenAIEmbeddingReplyError(f"the server at {where} sent an embedding with index {shown}")
            if vectors[index] is not None:
                raise OpenAIEmbeddingReplyError(f"the server at {where} sent index {index} twice")
            vectors[index] = self._vector(values, index, where)
        return [v for v in vectors if v is not None]

    def _vector(self, values: object, index: int, where: str) -> list[float]:
        dimension = self._config.dimension
        if not isinstance(values, list) or len(values) != dimension:
            size = len(values) if isinstance(values, list) else type(values).__name__
            raise OpenAIEmbeddingReplyError(
                f"the server at {where} sent embedding {index} of {size} values, not {dimension} "
                f"(dimension); configure the dimension {self._config.model!r} produces"
            )
        out: list[float] = []
        for v in values:
            number = None
            if isinstance(v, int | float) and not isinstance(v, bool):
                try:
                    number = float(v)
                except OverflowError:  # an integer of hundreds of digits: no float holds it
                    number = None
            if number is None or not math.isfinite(number):
                shown = repr(v) if isinstance(v, float) else self._calls.shown(v)
                if isinstance(v, int) and not isinstance(v, bool):
                    shown = f"an integer of {len(str(abs(v)))} digits"
                raise OpenAIEmbeddingReplyError(f"the server at {where} sent embedding {index} with {shown}")
            out.append(number)
        return out

    async def health(self, ctx: OpContext) -> str:
        """List the server's models (``GET /models``), as the provider's probe does."""
        ctx.raise_if_expired("embedder health")
        answer = await self._transport.health(ctx)
        return f"embeddings {self._model.key()}; {answer}"

    async def aclose(self) -> None:
        """Close the client this embedder created (a no-op before first use); idempotent."""
        await self._transport.aclose()
