"""Child process of ``test_sigkill_sqlite``: works on a SQLite file until it is SIGKILLed.

Run as ``python _sigkill_child.py DB LAYOUT SEED MODE``. It opens a runtime on the
SQLite archive, session store and recall store (one file, or the
archive in a second one: see ``build_runtime``; the default
``synchronous=FULL``), with a resident bound of two groups so that nearly
every commit evicts into the archive, and loops over ``run``, ``append``,
``retract`` and ``reset_view`` on a few sessions, with an extractive
summarizer updating each session's summary in the background, closing the
runtime and opening a new one now and then. Before each call it prints
a ``begin`` line naming what it attempts, and after the call RETURNED one
``ack`` line saying what was acknowledged (seq, revision, texts, retracted
messages, view start); both are JSON, flushed at once. The parent kills it at
a moment of its choosing and checks the file holds every acknowledged thing.

``MODE`` is ``ok`` or ``ack-before-commit``: the negative control. There the
session store's write transaction prints the pending append's ``ack`` line
just BEFORE its ``COMMIT`` (and waits there to be killed), as an adapter that
acknowledged before its commit was durable would; the parent kills it there
and its checks must report the acknowledged append lost. Only the proof that
the test can fail uses it.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from agentium_harness import (
    HarnessRuntime,
    Message,
    ResidentLimits,
    RetractionRefusedError,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters import sqlite as sqlite_module
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

IDENTITY = VerifiedIdentity("acme", "ana", "sso")
SESSIONS = ("s-alpha", "s-beta", "s-gamma")
REPLIES = ("reply one", "reply two", "reply three")
#: How long the broken mode waits between its acknowledgement and its COMMIT (it is killed first).
KILL_WAIT_S = 120.0
#: A child that is never killed stops after this many operations (the parent kills it well before).
MAX_OPS = 400

#: The append whose ack the broken mode prints before its commit (see the module docs).
_pending: dict[str, Any] | None = None


def emit(record: dict[str, Any]) -> None:
    """One JSON line on stdout, flushed: the parent reads it at once."""
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def build_runtime(db: str, layout: str) -> HarnessRuntime:
    """The runtime under test on SQLite; the parent's checker builds the same.

    ``layout`` ``one-file`` keeps everything in ``db`` (the archive and the
    session store then commit a turn in one transaction); ``two-files`` puts
    the archive in a file of its own, so a turn's evicted groups are archived
    in one commit and the snapshot saved in another, and a kill can land
    between the two.
    """
    archive = db if layout == "one-file" else f"{db}-archive"
    return create_harness_runtime(
        provider=ScriptedProvider(replies=list(REPLIES), cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=archive, busy_timeout_ms=20_000)),
        session_store=SQLiteSessionStore(SQLiteConfig(path=db, busy_timeout_ms=20_000)),
        recall=SQLiteRecallStore(SQLiteRecallConfig(path=db, busy_timeout_ms=20_000)),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        # Retractions and resets hide many recall candidates, which makes rounds partial; the
        # default policy would stop those runs, and this test wants every run to commit.
        recall_policy=current_session_recall_policy(on_partial="continue"),
        # Summary updates save new revisions in the background, after the call returned.
        summarizer=ExtractiveSummarizer(),
    )


def break_adapter() -> None:
    """Negative control: the session store acknowledges a pending append before its COMMIT."""
    original = sqlite_module.immediate_transaction

    @contextmanager
    def ack_before_commit(conn: Any, *begin: Any) -> Iterator[None]:
        global _pending
        with original(conn, *begin):  # ``begin``: how the store's writes begin (begin_immediate)
            yield
            if _pending is not None:
                emit(_pending)
                _pending = None
                # Acknowledged, not committed: wait here for the parent's SIGKILL, which it sends
                # on reading this line, so the kill lands in this window whatever the machine's load.
                time.sleep(KILL_WAIT_S)

    sqlite_module.immediate_transaction = ack_before_commit  # type: ignore[assignment]


async def work(db: str, layout: str, seed: int, broken: bool) -> None:
    """Operations chosen by ``seed``; now and then the runtime is closed and a new one opened."""
    rng = random.Random(seed)
    n = 0
    while n < MAX_OPS:
        async with build_runtime(db, layout) as runtime:
            if n == 0:
                emit({"kind": "ready"})
            while n < MAX_OPS:
                n += 1
                session = rng.choice(SESSIONS)
                op = rng.choices(("append", "run", "retract", "reset", "reopen"), weights=(5, 3, 3, 1, 1))[0]
                if op == "reopen":
                    # Closing settles background summaries and checkpoints the WAL: kills land there too.
                    break
                await step(runtime, rng, session, op, f"{seed}-{n}", broken)


async def step(
    runtime: HarnessRuntime, rng: random.Random, session: str, op: str, tag: str, broken: bool
) -> None:
    """One operation: a ``begin`` line, the call, an ``ack`` line once it returned."""
    global _pending
    begin: dict[str, Any] = {"kind": "begin", "session": session, "op": op, "tag": tag}
    if op == "append":
        texts = [f"user {tag}", f"assistant {tag}"][: rng.randint(1, 2)]
        begin["texts"] = texts
        emit(begin)
        messages = [Message(Role.USER if i == 0 else Role.ASSISTANT, t) for i, t in enumerate(texts)]
        if broken:
            view = await runtime.inspect_session(IDENTITY, session)
            _pending = {"kind": "ack", "session": session, "op": op, "tag": tag}
            _pending.update(seq=view.next_seq, revision=(view.revision or 0) + 1, texts=texts)
        result = await runtime.append(IDENTITY, session, messages)
        if broken and _pending is None:
            return  # already acknowledged, before the commit
        _pending = None
        emit(
            {
                "kind": "ack",
                "session": session,
                "op": op,
                "tag": tag,
                "seq": result.seq,
                "revision": result.snapshot_revision,
                "texts": texts,
            }
        )
    elif op == "run":
        text = f"question {tag}"
        begin["texts"] = [text]
        emit(begin)
        done = await runtime.run(IDENTITY, session, text)
        assert done.committed and done.group_seq is not None, done
        emit(
            {
                "kind": "ack",
                "session": session,
                "op": op,
                "tag": tag,
                "seq": done.group_seq,
                "revision": done.snapshot_revision,
                "texts": [text, done.output],
            }
        )
    elif op == "retract":
        count = rng.randint(1, 3)
        emit(begin)
        try:
            taken = await runtime.retract(IDENTITY, session, count=count, reason=tag)
        except RetractionRefusedError:
            emit({"kind": "refused", "session": session, "tag": tag})
            return
        emit(
            {
                "kind": "ack",
                "session": session,
                "op": op,
                "tag": tag,
                "seq": taken.seq,
                "revision": taken.snapshot_revision,
                "retracted": [[r.seq, r.index] for r in taken.retracted],
                "texts": [m.content for m in taken.messages],
            }
        )
    else:
        emit(begin)
        reset = await runtime.reset_view(IDENTITY, session, reason=tag)
        emit(
            {
                "kind": "ack",
                "session": session,
                "op": op,
                "tag": tag,
                "seq": reset.seq,
                "revision": reset.snapshot_revision,
                "view_start": reset.view_start,
            }
        )


def main() -> None:
    db, layout, seed, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode not in ("ok", "ack-before-commit") or layout not in ("one-file", "two-files"):
        raise SystemExit(f"unknown layout {layout!r} or mode {mode!r}")
    broken = mode == "ack-before-commit"
    if broken:
        break_adapter()
    anyio.run(work, db, layout, seed, broken)


if __name__ == "__main__":
    main()
