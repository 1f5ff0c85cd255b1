"""Fixtures: the project's own OpenAI-compatible server on a free loopback port, and providers for it.

The server is real HTTP (``openai_stub_server``); the provider talks to it
through the official ``openai`` client. Nothing here mocks the client.
Helpers live in ``openai_helpers`` (tests import from there, not from here).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from openai_helpers import make_provider
from openai_stub_server import StubServer, running

from agentium_provider_openai import OpenAIProvider


@pytest.fixture
def anyio_backend() -> str:
    """asyncio by default; one test also runs on trio (see test_openai_mapping)."""
    return "asyncio"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A fresh server per test: its script and its received requests are the test's own."""
    with running() as server:
        yield server


@pytest.fixture
async def provider(stub: StubServer) -> AsyncIterator[OpenAIProvider]:
    """A provider for ``stub``, closed after the test."""
    built = make_provider(stub)
    yield built
    await built.aclose()
