"""Fixtures of the Agent Framework integration's tests: the asyncio backend, a runtime on a SQLite file.

The runtime is built by ``af_runtimes.build_runtime``, which lives beside
this file; tests import from it, never from this conftest (another folder's
conftest may hold that module name in a whole-repository run). A test file
that needs another runtime (with replies and tools for a ``run()``, smaller
pages, other limits) defines its own ``runtime`` fixture, which overrides this one.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# As in the openai-agents folder: the helper beside this file is importable here in any run.
sys.path.insert(0, str(Path(__file__).parent))

from af_runtimes import build_runtime

from agentium_harness import HarnessRuntime


@pytest.fixture
def anyio_backend() -> str:
    """asyncio, the loop Agent Framework runs its agents on; a file testing other loops overrides it."""
    return "asyncio"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[HarnessRuntime]:
    """A runtime owning a SQLite archive and session store in a file of the test's own, closed after it."""
    built = build_runtime(tmp_path / "agentium.db")
    try:
        yield built
    finally:
        await built.aclose()
