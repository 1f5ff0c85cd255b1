"""An offline CPU embedder for Agentium's hybrid recall: all-MiniLM-L6-v2 (int8 ONNX), nothing downloaded.

Register it by installing the distribution (``agentium-embedder-minilm``);
select it with ``[embedder] plugin = "minilm"`` beside a recall store that
keeps vectors (the built-in ``sqlite`` store does). See the README for the
model, its licence and what it costs.
"""

from __future__ import annotations

from ._wordpiece import VOCAB_SHA256, WordPiece, load_vocab
from .embedder import (
    MAX_INPUT_BYTES,
    MODEL,
    MODEL_SHA256,
    MiniLMConfig,
    MiniLMEmbedder,
    MiniLMUnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "MAX_INPUT_BYTES",
    "MODEL",
    "MODEL_SHA256",
    "VOCAB_SHA256",
    "MiniLMConfig",
    "MiniLMEmbedder",
    "MiniLMUnavailableError",
    "WordPiece",
    "__version__",
    "load_vocab",
]
