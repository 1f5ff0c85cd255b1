"""Fixtures: the project's own OpenAI-compatible server on a free loopback port, and providers for it.

The server is real HTTP (``openai_stub_server``); the provider talks to it
through the official ``openai`` client. Nothing here mocks the client.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from openai_stub_server import StubServer, running

from agentium_provider_openai import OpenAIProvider, OpenAIProviderConfig

#: The key the stub server expects, given to providers through this variable.
KEY_ENV = "AGENTIUM_TEST_OPENAI_KEY"


@pytest.fixture
def anyio_backend() -> str:
    """The client runs on asyncio here (the runtime's trio support is tested in the core)."""
    return "asyncio"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A fresh server per test: its script and its received requests are the test's own."""
    with running() as server:
        yield server


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


@pytest.fixture
async def provider(stub: StubServer) -> AsyncIterator[OpenAIProvider]:
    """A provider for ``stub``, closed after the test."""
    built = make_provider(stub)
    yield built
    await built.aclose()
