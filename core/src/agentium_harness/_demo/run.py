"""``agentium demo``: a scripted conversation, on the embedded SQLite defaults or on a config's adapters.

It runs long enough to evict, prints one line per turn, and ends by proving
that every message is recoverable from the archive plus resident history with
matching digests. On the defaults no model and no network are involved; with
``--config FILE`` the demo runs on whatever adapters the file configures, so
a plugin author can watch their archive or session store at work.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread

from .._config.load import ResolvedConfig
from .._config.runtime import build_runtime
from .._engine.build import create_harness_runtime
from .._engine.limits import ResidentLimits, RuntimeLimits
from .._engine.recall_policy import current_session_recall_policy
from .._engine.runtime import HarnessRuntime
from .._engine.tools import EffectLevel, Tool, ToolRegistry
from .._errors import InvalidArgumentError
from .._history import MessageGroup, Role
from .._ports import OpContext
from .._ports._base import capabilities_of
from .._ports.archive import ArchiveCapabilities, HistoryArchive
from .._ports.sessions import SessionStore, SessionStoreCapabilities
from .._ports.summary import SummaryLimits, SummaryState
from .._scope import SessionKey, VerifiedIdentity
from ..adapters.providers import ExtractiveProvider, ScriptedProvider
from ..adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from ..adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from ..adapters.summarizers import ExtractiveSummarizer, ExtractiveSummarizerConfig
from .task import run_task

__all__ = ["DEMO_DB", "prepare_demo_dir", "run_demo", "run_demo_config"]

#: File the demo keeps its history in, inside ``--dir``.
DEMO_DB = "demo.db"
_IDENTITY = VerifiedIdentity(tenant="demo-tenant", user="demo-user", verified_by="agentium-demo")
#: Stated in the first turn, evicted as the conversation goes on, recalled at the end.
FACT = "the warehouse door code is 4719"
QUESTION = "What is the warehouse door code?"
_TOPICS = ["milk", "eggs", "bread", "coffee", "apples", "rice", "tea", "cheese", "lemons", "oats"]


def prepare_demo_dir(directory: Path) -> Path:
    """Check ``directory`` for the demo and create it if needed; return it.

    It may be an existing, writable folder, or a new folder whose parent
    exists (only the last component is created, never a chain of parents).
    Anything else — a file, a missing parent, a folder that cannot be
    created or written — raises :class:`~agentium_harness._errors.InvalidArgumentError`
    and creates nothing.
    """
    if not str(directory).strip():
        raise InvalidArgumentError("--dir must name a folder")
    try:
        return _usable_dir(directory)
    except OSError as exc:  # a name too long, a loop of links: Path.exists() raises these
        raise InvalidArgumentError(f"--dir {directory}: cannot be used: {exc.strerror or exc}") from None


def _usable_dir(directory: Path) -> Path:
    """``directory``, checked and created as :func:`prepare_demo_dir` says; ``OSError`` from a check."""
    if directory.exists():
        if not directory.is_dir():
            raise InvalidArgumentError(f"--dir {directory}: exists and is not a folder")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise InvalidArgumentError(f"--dir {directory}: the folder is not writable")
        return directory
    parent = directory.parent
    if not parent.exists():
        raise InvalidArgumentError(
            f"--dir {directory}: the parent folder {parent} does not exist; create it first"
        )
    if not parent.is_dir():
        raise InvalidArgumentError(f"--dir {directory}: {parent} is not a folder")
    try:
        directory.mkdir()  # not parents=True: a typo must not leave a tree of folders behind
    except OSError as exc:
        raise InvalidArgumentError(
            f"--dir {directory}: cannot create the folder: {exc.strerror or exc}"
        ) from exc
    return directory


async def _word_count(args: Mapping[str, Any]) -> str:
    return str(len(str(args.get("text", "")).split()))


def _script(turns: int) -> tuple[list[str], list[object]]:
    inputs: list[str] = []
    replies: list[object] = []
    for i in range(turns):
        topic = _TOPICS[i % len(_TOPICS)]
        inputs.append(f"Turn {i}: note that {FACT}." if i == 0 else f"Turn {i}: please remember {topic}.")
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


def _tools() -> ToolRegistry:
    return ToolRegistry([Tool("word_count", _word_count, EffectLevel.NONE, "count words")])


async def run_demo(directory: Path, turns: int, out: TextIO) -> bool:
    """Run the demo in ``directory`` for ``turns`` turns; return whether the final proof held.

    :raises InvalidArgumentError: when ``directory`` cannot hold the demo (see :func:`prepare_demo_dir`).
    """
    await anyio.to_thread.run_sync(prepare_demo_dir, directory)
    config = SQLiteConfig(path=str(directory / DEMO_DB))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    # The recall index lives in the same file; the engine indexes each group it archives.
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=config.path))
    inputs, replies = _script(turns)
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=4))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=replies),
        archive=archive,
        session_store=store,
        recall=recall,
        # The scripted turns are not about earlier evidence: recall that finds
        # only part of it must not stop them. The final question uses the default.
        recall_policy=current_session_recall_policy(on_partial="continue"),
        limits=limits,
        tools=_tools(),
        owned=[archive, store, recall],
        # Inline, so each turn's line shows the summary it just folded.
        summarizer=ExtractiveSummarizer(ExtractiveSummarizerConfig(sentences_per_group=1)),
        summary_limits=SummaryLimits(background=False),
    )

    async def recall_the_fact(session_id: str) -> bool:
        stored = await store.load(SessionKey.of(_IDENTITY, session_id), OpContext())
        if stored is None or stored.snapshot.boundary == 0:
            print("recall: not shown; the first turn is still resident (give more --turns)", file=out)
            return await run_task(archive, store, _IDENTITY, f"{session_id}-task", directory, out)
        asker = create_harness_runtime(
            provider=ExtractiveProvider(), archive=archive, session_store=store, recall=recall, limits=limits
        )
        result = await asker.run(_IDENTITY, session_id, QUESTION)
        outcome = result.recall
        assert outcome is not None
        included = ", ".join(r.source_id for r in outcome.included) or "nothing"
        u = outcome.usage
        print(
            f"recall: {QUESTION!r} -> status {outcome.status.value}, decision {outcome.decision.value}",
            file=out,
        )
        print(f"  in the prompt as labeled source data: {included}", file=out)
        print(
            f"  budget use: {u.candidates} candidate(s), {u.discovery_bytes} discovery bytes, "
            f"{u.source_bytes} source bytes, {u.evidence_tokens} evidence tokens, "
            f"{u.validations} validations, {u.latency_s * 1000:.1f} ms",
            file=out,
        )
        print(f"  answer: {result.output}", file=out)
        recalled = outcome.status.value == "complete" and "4719" in result.output
        verified = await run_task(archive, store, _IDENTITY, f"{session_id}-task", directory, out)
        return recalled and verified

    return await _converse(runtime, inputs, out, f"database {config.path}", finale=recall_the_fact)


async def run_demo_config(config: ResolvedConfig, turns: int, out: TextIO) -> bool:
    """Run the demo on the runtime ``config`` describes; return whether the final proof held.

    The demo's inputs go to the configured provider (a ``scripted`` one with
    ``cycle = true`` is enough); the ``word_count`` tool is offered and
    granted. The proof reads the configured archive back, which needs it to
    declare ``bounded_reads``; without it the proof is reported as not checked.
    The config is loaded by the caller (``agentium demo --config``), which hides
    its ``${VAR}`` values from the error an adapter may end the demo with.

    :raises ConfigError: when an adapter cannot be built.
    """
    runtime = build_runtime(config, tools=_tools())
    inputs, _ = _script(turns)
    return await _converse(runtime, inputs, out, f"config {config.source}")


async def _session_id(store: SessionStore) -> str:
    caps = capabilities_of(store)
    if isinstance(caps, SessionStoreCapabilities) and caps.listing:
        existing = await store.list_sessions(_IDENTITY.tenant, _IDENTITY.user, 10_000, OpContext())
        # Each demo's task turn has a session of its own, "<session>-task": not a demo of its own.
        return f"demo-{sum(1 for s in existing if not s.endswith('-task')) + 1}"
    # A store that cannot list gets a fresh, time-based id instead.
    return f"demo-{time.time_ns():x}"


async def _converse(
    runtime: HarnessRuntime,
    inputs: list[str],
    out: TextIO,
    where: str,
    finale: Callable[[str], Awaitable[bool]] | None = None,
) -> bool:
    receipts: dict[int, str] = {}
    frontier = 0
    state: SummaryState | None = None
    try:
        # Each invocation starts a new session, so earlier demo sessions in the
        # same store stay as they were (and show the history persisted).
        session_id = await _session_id(runtime.session_store)
        print(f"agentium demo: {len(inputs)} turns, session {session_id!r}, {where}", file=out)
        for i, text in enumerate(inputs):
            result = await runtime.run(_IDENTITY, session_id, text, grants=["word_count"])
            receipts.update({r.seq: r.digest for r in result.archived})
            print(
                f"turn {i:>3}  resident={result.resident_groups:<2} archived={result.boundary:<3} "
                f"boundary={result.boundary:<3} run={result.status.value} eviction={result.eviction.value} "
                f"sources={result.sources.value} tools={len(result.tool_outcomes)}",
                file=out,
            )
            state = result.summary
            if state is not None and state.summary.frontier != frontier:
                frontier = state.summary.frontier
                cited = ", ".join(str(c.seq) for c in state.summary.citations)
                print(f"          summary: {state.coverage()}; citations [{cited}]", file=out)
        if state is not None and state.summary.text:
            print("summary text (each line cites its group):", file=out)
            for line in state.summary.text.splitlines()[:4]:
                print(f"  {line}", file=out)
        key = SessionKey.of(_IDENTITY, session_id)
        ok = await _prove(runtime.archive, runtime.session_store, key, inputs, receipts, out)
        if ok and finale is not None:
            ok = await finale(session_id)
        report = await runtime.resources.close_session(_IDENTITY, session_id)
        print(f"close_session: {report.status.value}, flushed {report.flushed_groups}", file=out)
    finally:
        await runtime.aclose()
    return ok


async def _prove(
    archive: HistoryArchive,
    store: SessionStore,
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
    caps = capabilities_of(archive)
    if snap.boundary and not (isinstance(caps, ArchiveCapabilities) and caps.bounded_reads):
        print(
            f"proof not checked: archive {type(archive).__name__} does not declare bounded_reads, "
            f"so its {snap.boundary} archived groups cannot be read back",
            file=out,
        )
        return True
    archived: list[MessageGroup] = []
    at = 0
    # On from the last group read, to an empty page or the boundary: a page may be shorter than
    # asked, and an archive with a gap (a configured plugin's) answered a read from len(archived)
    # with groups past the boundary only, read again without end. A gap is reported below.
    while at < snap.boundary:
        page = await archive.read_groups(key, at, 100, ctx)
        if not page:
            break
        archived.extend(g for g in page if g.seq < snap.boundary)
        if page[-1].seq < at:  # an answer that does not move on is read no further
            break
        at = page[-1].seq + 1
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
