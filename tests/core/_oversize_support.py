"""Shared pieces of the tests that damage a SQLite file by hand and check what the stores then do.

A value is built by SQLite itself (``printf``, ``zeroblob``) so the test
never holds it: tracemalloc's peak then tells whether a store read it.
"""

from __future__ import annotations

import sqlite3
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import pytest

from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._errors import AgentiumError
from agentium_harness._json import MAX_JSON_BYTES
from agentium_harness._ports import OpContext
from agentium_harness.adapters import _sqlite_rows
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

#: For a digest, an id, a text or a version: far over anything a store writes (ids, digests,
#: source ids and versions are at most tens of KiB). Each test has SQLite build and write one;
#: 16 MiB rather than 64 took about a third off these files' run, every value still refused unread.
HUGE: Final = 16 * 1024 * 1024
#: Half of HUGE: a read that fetched the value would pass it.
PEAK: Final = 8 * 1024 * 1024
#: Just past what any stored JSON (a snapshot, a text, a title, a group's bytes) may take.
OVER_JSON: Final = MAX_JSON_BYTES + 1024
#: A text of one character, a NUL, then ``?`` more: ``length()`` counts one character of it.
NUL_TEXT: Final = "'x' || char(0) || printf('%.*c', ?, 'x')"
#: The user whose sessions the runtime tests write.
ANA: Final = VerifiedIdentity("acme", "ana", "test-auth")
#: The operator the runtime tests erase as.
OPERATOR: Final = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")


def ctx() -> OpContext:
    """An operation context with a deadline generous enough for a loaded CI machine."""
    return OpContext.with_timeout(30.0)


def raw_sql(path: Path, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run ``statement`` on its own connection to ``path``, committed, and return its rows."""
    conn = sqlite3.connect(path)
    # The damage is the test's own setup: syncing the hundreds of MiB a huge value takes to disk
    # bought nothing but most of these files' run time on a busy disk.
    conn.execute("PRAGMA synchronous = OFF")
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


async def refused_unread(
    call: Callable[[], Awaitable[object]], error: type[AgentiumError], match: str, what: str
) -> None:
    """``call`` raises ``error`` matching ``match``, with a short message, the value never read."""
    tracemalloc.start()
    try:
        with pytest.raises(error) as info:
            await call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"{what}: {peak} bytes traced, the huge value was read into Python"
    info.match(match)
    assert len(str(info.value)) < 1000, what


def sqlite_runtime(path: Path) -> HarnessRuntime:
    """A runtime on the SQLite file ``path`` keeping two groups resident (older ones are archived)."""
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["x"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def five_turns(path: Path) -> None:
    """Write five turns to ANA's session s1 on ``path``: groups 0-2 archived (adopted), 3 and 4 resident."""
    async with sqlite_runtime(path) as rt:
        for n in range(5):
            await rt.append(ANA, "s1", [Message(Role.USER, f"q{n}"), Message(Role.ASSISTANT, f"a{n}")])


def group_ids(path: Path, seq: int, session: str = "s1") -> tuple[int, int]:
    """The two row ids group ``seq`` of ``session`` may be stored under (the store's, the archive's)."""
    [(sid,)] = raw_sql(path, "SELECT sid FROM sessions WHERE session_id = ?", (session,))
    assert isinstance(sid, int)
    return _sqlite_rows.row_id(sid, seq, False), _sqlite_rows.row_id(sid, seq, True)


async def erased_digests(path: Path, target: EraseTarget) -> dict[int, str]:
    """Erase ``target`` through a runtime on ``path`` as OPERATOR; it must complete. The recorded digests."""
    async with sqlite_runtime(path) as rt:
        result = await rt.erase(target, reason="request", attestation=OPERATOR)
    assert result.tombstone is not None, result
    return {seq: digest for s in result.record.sessions for seq, digest in s.digests}
