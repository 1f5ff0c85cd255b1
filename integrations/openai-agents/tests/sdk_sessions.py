"""The class under test for the SDK's own session tests: ``AgentiumSession`` built like the SDK's sessions.

The SDK's tests build ``SQLiteSession(session_id, db_path)`` and
``AsyncSQLiteSession(session_id, db_path)``; the suite runner
(``sdk_suite.py``) rebinds those names in a temporary copy of the test files
to the two classes here. Each is an :class:`~agentium_openai_agents.AgentiumSession`
over a runtime of its own on Agentium's SQLite archive and session store in
``db_path`` (WAL, ``synchronous=FULL``), or on the in-memory adapters for
``":memory:"``, and closes that runtime when it is closed: the sync
``close()`` of ``SQLiteSession``, the async one of ``AsyncSQLiteSession``.
Only the constructor and ``close`` differ; every history operation is the
integration's own. The table-name arguments are accepted and unused
(Agentium's tables are its own).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio

from agentium_harness import HarnessRuntime, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_openai_agents import AgentiumSession

#: The host-verified identity every session of the SDK's tests belongs to.
IDENTITY = VerifiedIdentity("sdk-tests", "sdk-user", "test-harness")
#: Two users of the integration's own tests.
ANA = VerifiedIdentity("acme", "ana", "sso")
BOB = VerifiedIdentity("acme", "bob", "sso")


def build_runtime(db_path: str | Path) -> HarnessRuntime:
    """A runtime owning its adapters: SQLite on ``db_path`` (WAL, FULL), in memory for ``":memory:"``."""
    if str(db_path) == ":memory:":
        archive: Any = InMemoryArchive()
        store: Any = InMemorySessionStore()
    else:
        config = SQLiteConfig(path=str(db_path), synchronous="FULL")
        archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        # The SDK runs the model; Agentium's run() is never called by a session.
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
    )


class AgentiumSQLiteSession(AgentiumSession):
    """``SQLiteSession``'s constructor and sync ``close()`` over an ``AgentiumSession``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(build_runtime(db_path), IDENTITY, session_id, session_settings=session_settings)
        self._closing = threading.Lock()
        self._runtime_closed = False

    def close(self) -> None:
        """Refuse further calls; close the runtime in a thread of its own (the caller may be in a loop)."""
        super().close()
        with self._closing:
            if self._runtime_closed:
                return
            failure: list[BaseException] = []

            def closer() -> None:
                try:
                    anyio.run(self.runtime.aclose)
                except BaseException as exc:  # reported to the caller below
                    failure.append(exc)

            worker = threading.Thread(target=closer, name="agentium-session-close")
            worker.start()
            worker.join()
            if failure:
                raise failure[0]
            self._runtime_closed = True


class AgentiumAsyncSQLiteSession(AgentiumSession):
    """``AsyncSQLiteSession``'s constructor and async ``close()`` over an ``AgentiumSession``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(build_runtime(db_path), IDENTITY, session_id, session_settings=session_settings)

    async def close(self) -> None:  # type: ignore[override]
        """Refuse further calls and close the runtime (concurrent and repeated calls share one close)."""
        AgentiumSession.close(self)
        await self.runtime.aclose()
