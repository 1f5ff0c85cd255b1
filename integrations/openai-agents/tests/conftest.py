"""Fixtures of the OpenAI Agents SDK integration's tests: runtimes on real SQLite files and in memory.

``sdk_sessions`` (the class under test for the SDK's own suite, and the
identities the tests use) and the suite runner ``sdk_suite`` live beside
this file; tests import from them, never from this conftest (another
folder's conftest may hold that module name in a whole-repository run).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sdk_sessions import build_runtime
from sdk_suite import SUMMARY

from agentium_harness import HarnessRuntime


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[HarnessRuntime]:
    """A runtime on Agentium's SQLite archive and session store in a fresh file (WAL, FULL), closed after."""
    built = build_runtime(tmp_path / "agentium.db")
    try:
        yield built
    finally:
        await built.aclose()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """In a run without workers: print the SDK suite's counts (with workers, the root conftest does)."""
    for line in SUMMARY:
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand the SDK suite's counts to the main process, which prints them."""
    output = getattr(session.config, "workeroutput", None)
    if isinstance(output, dict) and SUMMARY:
        output.setdefault("agentium_summary", []).extend(SUMMARY)
