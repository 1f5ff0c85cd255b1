"""A model provider for deadline tests: it answers late, or only once a gate opens."""

from __future__ import annotations

import anyio

from agentium_harness._history import Message, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import ModelProvider, ModelRequest, ModelResponse, ProviderCapabilities


class SlowProvider(ModelProvider):
    """Answers after ``delay`` seconds; with ``gate``, not before the gate is set."""

    capabilities = ProviderCapabilities()

    def __init__(self, delay: float = 0.0, gate: anyio.Event | None = None) -> None:
        self.delay = delay
        self.gate = gate
        self.contexts: list[OpContext] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.contexts.append(ctx)
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await anyio.sleep(self.delay)
        return ModelResponse(Message(Role.ASSISTANT, "answer"))
