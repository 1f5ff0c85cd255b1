"""The runtime the Agent Framework integration's tests put an ``AgentiumHistoryProvider`` on.

Every test file of this folder builds the same thing: a runtime owning
Agentium's real SQLite archive and session store in one file, with a
scripted provider (the framework runs the model, so Agentium's ``run()`` is
mostly never called). It is kept here once, so a change to how it is built
reaches every file; a file that needs a ``run()`` passes its replies and tools.
The module's name is unique across the workspace's test folders because
pytest imports each folder's helpers by their bare module name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentium_harness import HarnessRuntime, RuntimeLimits, ToolRegistry, create_harness_runtime
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

#: The provider's replies when no test calls ``run()``: it answers nothing the tests see.
NOT_CALLED: tuple[str] = ("(not called)",)


def build_runtime(
    db_path: Path,
    *,
    replies: Sequence[Any] = NOT_CALLED,
    tools: ToolRegistry | None = None,
    archive: SQLiteArchive | None = None,
    limits: RuntimeLimits | None = None,
) -> HarnessRuntime:
    """A runtime owning its SQLite archive (``archive``, or a new one) and session store in ``db_path``."""
    config = SQLiteConfig(path=str(db_path))
    archive = archive if archive is not None else SQLiteArchive(config)
    store = SQLiteSessionStore(config)
    # Only the arguments given are passed, so each runtime is built as its test file built it.
    extra: dict[str, Any] = {}
    if tools is not None:
        extra["tools"] = tools
    if limits is not None:
        extra["limits"] = limits
    return create_harness_runtime(
        provider=ScriptedProvider(replies=list(replies)),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        **extra,
    )
