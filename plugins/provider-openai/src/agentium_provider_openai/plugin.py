"""The plugin module named by the ``agentium`` entry point: registers the ``openai`` provider."""

from __future__ import annotations

from agentium_harness.plugin_api import AdapterSpec, Register, hookimpl

from .config import OpenAIProviderConfig
from .embedder import OpenAIEmbedder, OpenAIEmbedderConfig
from .provider import OpenAIProvider

__all__ = ["agentium_register_embedders", "agentium_register_providers"]


@hookimpl
def agentium_register_providers(register: Register) -> None:
    """Register the OpenAI-compatible provider as adapter ``openai`` (options: :class:`OpenAIProviderConfig`).

    Building it does no I/O: it reads the key from the variable ``api_key_env``
    names and connects on its first call.
    """
    register(
        AdapterSpec(
            name="openai",
            adapter_class=OpenAIProvider,
            config_class=OpenAIProviderConfig,
            description="OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM)",
        )
    )


@hookimpl
def agentium_register_embedders(register: Register) -> None:
    """Register the OpenAI-compatible embedder as adapter ``openai`` (options: :class:`OpenAIEmbedderConfig`).

    Building it does no I/O: it reads the key from the variable ``api_key_env``
    names and connects on its first call (``POST /v1/embeddings``).
    """
    register(
        AdapterSpec(
            name="openai",
            adapter_class=OpenAIEmbedder,
            config_class=OpenAIEmbedderConfig,
            description="OpenAI-compatible embeddings (/v1/embeddings) for hybrid recall",
        )
    )
