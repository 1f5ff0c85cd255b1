"""Helpers the provider's tests share (a uniquely named module: every test path runs together).

``conftest.py`` holds the fixtures; tests import helpers from here, never
from ``conftest`` (another distribution's ``conftest`` may be the one of that name).
"""

from __future__ import annotations

from typing import Any

import anyio
from openai_stub_server import StubServer

from agentium_provider_openai import OpenAIProvider, OpenAIProviderConfig

#: The key the stub server expects, given to providers through this variable.
KEY_ENV = "AGENTIUM_TEST_OPENAI_KEY"


def make_provider(server: StubServer, **options: Any) -> OpenAIProvider:
    """A provider built from config for ``server``, with fast retries unless ``options`` say otherwise."""
    settings: dict[str, Any] = {
        "model": "stub-model",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "retry_backoff_s": 0.01,
        "retry_backoff_max_s": 0.05,
    }
    settings.update(options)
    return OpenAIProvider(OpenAIProviderConfig(**settings), environ={KEY_ENV: server.api_key or ""})


async def request_arrived(server: StubServer, timeout_s: float = 30.0) -> None:
    """Wait until ``server`` has received a chat completion request (bounded, so a test never hangs)."""
    with anyio.fail_after(timeout_s):
        # The list is filled by the server's thread: there is no event to await.
        while not server.completions:  # noqa: ASYNC110
            await anyio.sleep(0.01)
