"""``agentium-provider-openai``: OpenAI-compatible Chat Completions as an Agentium model provider.

Select it in a config file with ``[provider] plugin = "openai"`` (options:
:class:`OpenAIProviderConfig`), or build :class:`OpenAIProvider` directly and
pass it to ``create_harness_runtime(provider=...)``, optionally lending it an
``openai.AsyncOpenAI`` client. See the distribution's README.
"""

from __future__ import annotations

from .config import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_TOOL_ARGUMENTS_BYTES,
    MAX_REPLY_BYTES_CEILING,
    MAX_TOOL_ARGUMENTS_DEPTH,
    REPLY_ENVELOPE_DEPTH,
    RESERVED_BODY_KEYS,
    OpenAIProviderConfig,
    redact_url,
)
from .embedder import OpenAIEmbedder, OpenAIEmbedderConfig
from .errors import (
    OpenAIConfigError,
    OpenAIConnectionError,
    OpenAIEmbeddingReplyError,
    OpenAIIncompleteReplyError,
    OpenAIMalformedReplyError,
    OpenAIProviderError,
    OpenAIReplyLimitError,
    OpenAIRetriesExhaustedError,
    OpenAIStatusError,
    OpenAIStreamingOnlyError,
)
from .provider import NO_KEY, RETRYABLE_STATUSES, OpenAIProvider
from .wire import (
    INCOMPLETE_FINISH_REASONS,
    SOURCE_PREAMBLE,
    parse_completion,
    request_messages,
    request_tools,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_MAX_TOOL_ARGUMENTS_BYTES",
    "INCOMPLETE_FINISH_REASONS",
    "MAX_REPLY_BYTES_CEILING",
    "MAX_TOOL_ARGUMENTS_DEPTH",
    "NO_KEY",
    "REPLY_ENVELOPE_DEPTH",
    "RESERVED_BODY_KEYS",
    "RETRYABLE_STATUSES",
    "SOURCE_PREAMBLE",
    "OpenAIConfigError",
    "OpenAIConnectionError",
    "OpenAIEmbedder",
    "OpenAIEmbedderConfig",
    "OpenAIEmbeddingReplyError",
    "OpenAIIncompleteReplyError",
    "OpenAIMalformedReplyError",
    "OpenAIProvider",
    "OpenAIProviderConfig",
    "OpenAIProviderError",
    "OpenAIReplyLimitError",
    "OpenAIRetriesExhaustedError",
    "OpenAIStatusError",
    "OpenAIStreamingOnlyError",
    "__version__",
    "parse_completion",
    "redact_url",
    "request_messages",
    "request_tools",
]
