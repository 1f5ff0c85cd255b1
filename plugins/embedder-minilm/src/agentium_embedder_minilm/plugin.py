"""The plugin module named by the ``agentium`` entry point: registers the ``minilm`` embedder."""

from __future__ import annotations

from agentium_harness.plugin_api import AdapterSpec, Register, hookimpl

from .embedder import MiniLMConfig, MiniLMEmbedder

__all__ = ["agentium_register_embedders"]


@hookimpl
def agentium_register_embedders(register: Register) -> None:
    """Register all-MiniLM-L6-v2 (int8 ONNX, CPU, offline) as embedder ``minilm`` (:class:`MiniLMConfig`).

    Building it does no I/O; the model loads, and its digest is checked, on first use.
    """
    register(
        AdapterSpec(
            name="minilm",
            adapter_class=MiniLMEmbedder,
            config_class=MiniLMConfig,
            description="all-MiniLM-L6-v2 (int8 ONNX) on the CPU, offline: 384-dimension sentence vectors",
        )
    )
