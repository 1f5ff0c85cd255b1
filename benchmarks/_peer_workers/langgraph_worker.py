"""LangGraph worker: a one-node graph over ``MessagesState``, checkpointed by ``SqliteSaver``.

The node returns the canned 500-character ``AIMessage`` (no model). A timed
turn is ``graph.invoke({"messages": [HumanMessage(text)]}, thread config,
durability="sync")``: LangGraph loads the thread's latest checkpoint, runs the
node, applies the ``add_messages`` reducer and writes its checkpoints and
pending writes, persisted before ``invoke`` returns (``"sync"``, so the turn
is durable when acknowledged, as Agentium's and the Agents SDK's are).

``SqliteSaver`` takes the caller's ``sqlite3.Connection``; this worker opens
it and sets WAL and ``synchronous=FULL`` on it before handing it over.

Seeding: one ``graph.update_state`` call with every prior message, as the
``respond`` node. LangGraph keeps the whole message list in each checkpoint,
so smaller batches would only write more checkpoints.

Held shape: after each timed turn the checkpoints and writes that the turn
added (checkpoint ids are time-ordered, so: those past the seeded thread's
latest id) are deleted in one transaction on the saver's connection, which
puts the thread back to its N messages (checked after the first restore).
``SqliteSaver`` has no API to drop checkpoints; deleting its rows is what its
own ``delete_thread`` does for a whole thread.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import common
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

INCLUDES = (
    'graph.invoke({"messages": [HumanMessage(500-char text)]}, thread, durability="sync"): load the latest '
    "checkpoint, run the node (returns a canned 500-char AIMessage), reduce, write checkpoints + writes"
)
CONFIG: Any = {"configurable": {"thread_id": common.SESSION_ID}}


def _respond(state: MessagesState) -> dict[str, list[BaseMessage]]:
    return {"messages": [AIMessage(content=common.REPLY)]}


def _open(db_path: str) -> tuple[sqlite3.Connection, Any]:
    # check_same_thread=False as LangGraph's docs show: SqliteSaver guards the connection with its own lock.
    conn = sqlite3.connect(db_path, check_same_thread=False)
    common.durable_wal(conn)
    builder = StateGraph(MessagesState)
    builder.add_node("respond", _respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return conn, builder.compile(checkpointer=SqliteSaver(conn))


def _message(i: int) -> BaseMessage:
    role = common.role_of(i)
    cls = HumanMessage if role == "user" else AIMessage
    return cls(content=common.message_text(i, role), id=f"seed-{i}")


def _seed(db_path: str, messages: int) -> dict[str, Any]:
    conn, graph = _open(db_path)
    try:
        if messages:
            graph.update_state(
                CONFIG, {"messages": [_message(i) for i in range(messages)]}, as_node="respond"
            )
        stored = graph.get_state(CONFIG).values.get("messages", [])
    finally:
        conn.close()
    if len(stored) != messages:
        raise SystemExit(f"seeded thread holds {len(stored)} messages, expected {messages}")
    return {"messages": len(stored)}


class LangGraph:
    """The compiled graph on a seeded database."""

    includes = INCLUDES

    def __init__(self, db_path: str, messages: int, shape: str) -> None:
        self.versions = {
            name: metadata.version(name)
            for name in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langchain-core")
        }
        self._conn, self._graph = _open(db_path)
        self._messages = messages
        self._next = messages
        self._held = shape == "held"
        self._checked = False
        row = self._conn.execute(
            "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?", (common.SESSION_ID,)
        ).fetchone()
        self._base = "" if row is None or row[0] is None else str(row[0])

    def _turn(self, i: int) -> None:
        # Message numbers of the conversation: a turn adds a user and an assistant message.
        self._graph.invoke(
            {"messages": [HumanMessage(content=common.message_text(2 * i, "user"))]},
            CONFIG,
            durability="sync",
        )

    def _restore(self) -> None:
        """Drop what the last turn checkpointed (held shape, untimed)."""
        with self._conn:
            for table in ("checkpoints", "writes"):
                self._conn.execute(
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_id > ?",
                    (common.SESSION_ID, self._base),
                )
        if not self._checked:
            held = len(self._graph.get_state(CONFIG).values.get("messages", []))
            if held != self._messages:
                raise SystemExit(f"restored thread holds {held} messages, expected {self._messages}")
            self._checked = True

    def run(self, n: int, max_seconds: float) -> common.TurnLog:
        """Up to ``n`` timed ``graph.invoke`` turns."""
        first = self._next // 2
        log = common.timed_loop(self._turn, first, n, max_seconds, self._restore if self._held else None)
        if not self._held:
            self._next += 2 * len(log)
        return log

    def connections(self) -> Sequence[sqlite3.Connection]:
        """The one connection the checkpointer writes through."""
        return [self._conn]

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


def main() -> None:
    """Seed, or serve timed turns."""
    args = common.arguments(__doc__.splitlines()[0])
    if args.seed:
        common.seed_all(args.seed, _seed)
        return
    common.serve(lambda: LangGraph(args.db, args.messages, args.shape))


if __name__ == "__main__":
    sys.exit(main())
