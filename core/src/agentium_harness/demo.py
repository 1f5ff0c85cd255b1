"""``agentium demo``: a scripted conversation on the embedded SQLite defaults.

It runs long enough to evict, prints one line per turn, and ends by proving
that every message is recoverable from the archive plus resident history with
matching digests. No model and no network are involved.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import anyio

from .adapters.providers import ScriptedProvider
from .adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from .engine.limits import ResidentLimits
from .engine.runtime import RuntimeLimits, create_harness_runtime
from .engine.tools import EffectLevel, Tool, ToolRegistry
from .history import MessageGroup, Role
from .ports import OpContext
from .scope import SessionKey, VerifiedIdentity

__all__ = ["DEMO_DB", "run_demo"]

#: File the demo keeps its history in, inside ``--dir``.
DEMO_DB = "demo.db"
_IDENTITY = VerifiedIdentity(tenant="demo-tenant", user="demo-user", verified_by="agentium-demo")
_TOPICS = ["milk", "eggs", "bread", "coffee", "apples", "rice", "tea", "cheese", "lemons", "oats"]


async def _word_count(args: Mapping[str, Any]) -> str:
    return str(len(str(args.get("text", "")).split()))


def _script(turns: int) -> tuple[list[str], list[object]]:
    inputs: list[str] = []
    replies: list[object] = []
    for i in range(turns):
        topic = _TOPICS[i % len(_TOPICS)]
        inputs.append(f"Turn {i}: please remember {topic}.")
        if i == 2:
            # One turn uses a granted tool, so a tool call and its result are
            # archived together as one complete group.
            replies.append(
                {
                    "content": "",
                    "tool_calls": [{"id": "call-1", "name": "word_count", "arguments": {"text": inputs[-1]}}],
                }
            )
        replies.append(f"Noted {topic} (turn {i}).")
    return inputs, replies


async def run_demo(directory: Path, turns: int, out: TextIO) -> bool:
    """Run the demo in ``directory`` for ``turns`` turns; return whether the final proof held."""
    await anyio.Path(directory).mkdir(parents=True, exist_ok=True)
    config = SQLiteConfig(path=str(directory / DEMO_DB))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    ctx = OpContext()
    # Each invocation starts a new session, so earlier demo sessions in the
    # same file stay as they were (and show the history persisted).
    existing = await store.list_sessions(_IDENTITY.tenant, _IDENTITY.user, 10_000, ctx)
    session_id = f"demo-{len(existing) + 1}"
    inputs, replies = _script(turns)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=replies),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=4)),
        tools=ToolRegistry([Tool("word_count", _word_count, EffectLevel.NONE, "count words")]),
        owned=[archive, store],
    )
    print(f"agentium demo: {turns} turns, session {session_id!r}, database {config.path}", file=out)
    receipts: dict[int, str] = {}
    try:
        for i, text in enumerate(inputs):
            result = await runtime.run(_IDENTITY, session_id, text, grants=["word_count"])
            receipts.update({r.seq: r.digest for r in result.archived})
            print(
                f"turn {i:>3}  resident={result.resident_groups:<2} archived={result.boundary:<3} "
                f"boundary={result.boundary:<3} run={result.status.value} eviction={result.eviction.value} "
                f"sources={result.sources.value} tools={len(result.tool_outcomes)}",
                file=out,
            )
        ok = await _prove(archive, store, SessionKey.of(_IDENTITY, session_id), inputs, receipts, out)
        report = await runtime.resources.close_session(_IDENTITY, session_id)
        print(f"close_session: {report.status.value}, flushed {report.flushed_groups}", file=out)
    finally:
        await runtime.aclose()
    return ok


async def _prove(
    archive: SQLiteArchive,
    store: SQLiteSessionStore,
    key: SessionKey,
    inputs: list[str],
    receipts: dict[int, str],
    out: TextIO,
) -> bool:
    ctx = OpContext()
    stored = await store.load(key, ctx)
    if stored is None:
        print("FAILED: the session was not stored", file=out)
        return False
    snap = stored.snapshot
    archived: list[MessageGroup] = []
    while len(archived) < snap.boundary:
        page = await archive.read_groups(key, len(archived), 100, ctx)
        if not page:
            break
        archived.extend(g for g in page if g.seq < snap.boundary)
    groups = archived + list(snap.resident)
    problems: list[str] = []
    if [g.seq for g in groups] != list(range(len(inputs))):
        problems.append(f"sequence numbers are not 0..{len(inputs) - 1}")
    for group, text in zip(groups, inputs, strict=False):
        if group.messages[0].role is not Role.USER or group.messages[0].content != text:
            problems.append(f"group {group.seq} does not hold turn {group.seq}'s input")
        if not group.is_complete:
            problems.append(f"group {group.seq} is incomplete")
    for group in archived:
        if receipts.get(group.seq) != group.digest:
            problems.append(f"group {group.seq}: archived digest differs from its receipt")
    messages = sum(len(g.messages) for g in groups)
    if problems:
        for p in problems:
            print(f"FAILED: {p}", file=out)
        return False
    print(
        f"recovered {len(groups)} groups ({len(archived)} archived + {len(snap.resident)} resident), "
        f"{messages} messages; every archived digest matches its receipt: yes",
        file=out,
    )
    return True
