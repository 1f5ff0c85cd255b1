"""OpenAI Agents SDK worker: ``SQLiteSession`` on a file, ``get_items`` then ``add_items`` (no model).

A timed turn is what ``Runner.run(..., session=session)`` asks of its session
around one model call, without the model: ``await session.get_items()`` (the
whole history, the SDK's default with no session limit) then ``await
session.add_items([user_item, assistant_item])``, the user's 500-character
input and the canned 500-character assistant output message. Both run in the
SDK's own worker threads (``asyncio.to_thread``); ``add_items`` commits once.

``SQLiteSession`` opens one connection per worker thread and configures each
in its ``_configure_connection`` hook (WAL only). A subclass extends that hook
to also set ``synchronous=FULL``. The parent reads the PRAGMAs of, and counts
the commits on, the connections the session tracks, including one a new
worker thread opens while commits are being counted. Nothing else of the
session is changed.

Seeding: ``add_items`` with ``SEED_BATCH`` items per call.

Held shape: after each timed turn, untimed, ``pop_item()`` twice removes the
turn's two items through the SDK's own API.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import common
from agents.memory.sqlite_session import SQLiteSession

INCLUDES = (
    "await session.get_items() (whole history) + await session.add_items([user 500-char item, "
    "assistant 500-char output message]) on SQLiteSession(file)"
)


class DurableSQLiteSession(SQLiteSession):
    """``SQLiteSession`` whose connections also run with ``synchronous=FULL``."""

    @staticmethod
    def _configure_connection(conn: sqlite3.Connection) -> None:
        SQLiteSession._configure_connection(conn)
        common.durable_wal(conn)
        common.follow_connection(conn)


def _item(i: int) -> Any:
    """Message ``i`` as the SDK stores it: a user input item or an assistant output message."""
    role = common.role_of(i)
    if role == "user":
        return {"role": "user", "content": common.message_text(i, role)}
    return _assistant(f"msg_{i}", common.message_text(i, role))


def _assistant(item_id: str, text: str) -> Any:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


async def _seed(db_path: str, messages: int) -> dict[str, Any]:
    session = DurableSQLiteSession(common.SESSION_ID, db_path)
    try:
        for start in range(0, messages, common.SEED_BATCH):
            await session.add_items(
                [_item(i) for i in range(start, min(messages, start + common.SEED_BATCH))]
            )
        stored = await session.get_items()
    finally:
        session.close()
    if len(stored) != messages:
        raise SystemExit(f"seeded session holds {len(stored)} items, expected {messages}")
    return {"messages": len(stored)}


class OpenAIAgents:
    """A ``SQLiteSession`` on a seeded database, driven from one event loop."""

    includes = INCLUDES

    def __init__(self, db_path: str, messages: int, shape: str) -> None:
        self.versions = {name: metadata.version(name) for name in ("openai-agents", "openai")}
        self._loop = asyncio.new_event_loop()
        self._session = DurableSQLiteSession(common.SESSION_ID, db_path)
        self._next = messages
        self._held = shape == "held"

    async def _batch(self, n: int, max_seconds: float) -> common.TurnLog:
        log = common.TurnLog()
        deadline = time.perf_counter() + max_seconds
        for k in range(n):
            if k and time.perf_counter() >= deadline:
                break
            i = self._next
            user = {"role": "user", "content": common.message_text(i, "user")}
            reply = _assistant(f"msg_{i + 1}", common.REPLY)
            log.start()
            history = await self._session.get_items()
            await self._session.add_items([user, reply])
            log.stop()
            if len(history) != i:
                raise SystemExit(f"turn read {len(history)} items, expected {i}")
            if self._held:
                # The turn's two items, newest first, through the SDK's own API (untimed).
                for expected in (reply, user):
                    popped = await self._session.pop_item()
                    if popped != expected:
                        raise SystemExit(f"pop_item returned {popped!r:.80}, not the turn's item")
            else:
                self._next += 2
        return log

    def run(self, n: int, max_seconds: float) -> common.TurnLog:
        """Up to ``n`` timed get + add turns."""
        return self._loop.run_until_complete(self._batch(n, max_seconds))

    def connections(self) -> Sequence[sqlite3.Connection]:
        """The per-thread connections opened so far (the schema connection is closed by the SDK)."""
        return list(self._session._connections)

    def close(self) -> None:
        """Close the session and the loop."""
        self._session.close()
        self._loop.close()


def main() -> None:
    """Seed, or serve timed turns."""
    args = common.arguments(__doc__.splitlines()[0])
    if args.seed:
        common.seed_all(args.seed, lambda db, n: asyncio.run(_seed(db, n)))
        return
    common.serve(lambda: OpenAIAgents(args.db, args.messages, args.shape))


if __name__ == "__main__":
    sys.exit(main())
