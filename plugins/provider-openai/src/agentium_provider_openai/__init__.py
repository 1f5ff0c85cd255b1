"""``agentium-provider-openai``: OpenAI-compatible Chat Completions as an Agentium model provider.

Select it in a config file with ``[provider] plugin = "openai"`` (options:
:class:`OpenAIProviderConfig`), or build :class:`OpenAIProvider` directly and
pass it to ``create_harness_runtime(provider=...)``, optionally lending it an
``openai.AsyncOpenAI`` client. See the distribution's README.
"""

from __future__ import annotations

from .config import DEFAULT_BASE_URL, RESERVED_BODY_KEYS, OpenAIProviderConfig, redact_url
from .errors import (
    OpenAIConfigError,
    OpenAIMalformedReplyError,
    OpenAIProviderError,
    OpenAIRetriesExhaustedError,
    OpenAIStatusError,
    OpenAIStreamingOnlyError,
)
from .provider import NO_KEY, RETRYABLE_STATUSES, OpenAIProvider
from .wire import SOURCE_PREAMBLE, parse_completion, request_messages, request_tools

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BASE_URL",
    "NO_KEY",
    "RESERVED_BODY_KEYS",
    "RETRYABLE_STATUSES",
    "SOURCE_PREAMBLE",
    "OpenAIConfigError",
    "OpenAIMalformedReplyError",
    "OpenAIProvider",
    "OpenAIProviderConfig",
    "OpenAIProviderError",
    "OpenAIRetriesExhaustedError",
    "OpenAIStatusError",
    "OpenAIStreamingOnlyError",
    "__version__",
    "parse_completion",
    "redact_url",
    "request_messages",
    "request_tools",
]
