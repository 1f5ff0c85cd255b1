"""``agentium memory``: list, remember, correct, forget and show the history of facts, for operators.

Every command reads the config file's ``[memory]`` section, builds that memory
store (no provider or archive is opened; ``remember`` and ``correct`` also
open the ``[session_store]``, where erasures are recorded, so a fact an
erasure under way covers is refused as through a runtime), and goes through
a :class:`~agentium_harness._engine.memory.manager.MemoryManager`, so the
same checks, acknowledgments and lifecycle hooks apply as for a host's
calls. The scope is ``--tenant`` and ``--user`` (optionally ``--project``
and ``--repository``); a fact id of another tenant or user is refused as if
it did not exist.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from .._config.runtime import build_component
from .._engine.lifecycle import close_owned
from .._engine.memory.manager import MemoryManager
from .._engine.memory_fence import fence_memory
from .._errors import InvalidArgumentError
from .._ports.memory import MemoryAck, MemoryFact, MemoryScope, MemoryStore, StoredFact, iso_utc
from .._ports.sessions import SessionStore
from .interrupt import run_async
from .output import (
    NEVER_WRITTEN,
    add_config_argument,
    hide_env,
    load_hiding,
    print_json,
    reading_only,
    refuse_missing,
    shown,
    text_argument,
    unless_missing,
)

__all__ = ["add_memory_commands"]

T = TypeVar("T")

#: Exit code of ``remember`` when the fact was rejected (the reason is printed).
EXIT_REJECTED = 1


def _when(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{flag} {text!r} is not an ISO 8601 time (e.g. 2030-01-31T12:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise InvalidArgumentError(f"{flag} {text!r} has no time zone; add Z or an offset such as +01:00")
    return value


def _scope(args: argparse.Namespace) -> MemoryScope:
    return MemoryScope(args.tenant, args.user, args.project, args.repository)


def _fact(args: argparse.Namespace) -> MemoryFact:
    return MemoryFact(
        _scope(args),
        text_argument(args.text, "the TEXT argument", "nothing was stored"),
        valid_from=_when(args.valid_from, "--valid-from"),
        valid_until=_when(args.valid_until, "--valid-until"),
    )


def _with_manager(
    args: argparse.Namespace,
    work: Callable[[MemoryManager], Awaitable[T]],
    *,
    reading: bool = False,
    fenced: bool = False,
    changing: bool = False,
    outcome: str = "nothing was changed",
) -> T:
    """``work`` on the config's memory; ``reading`` (a list, a history) creates no database file.

    ``changing`` (correct, forget: a change to a fact already stored) creates none either when
    the memory database does not exist: no fact is there to change (:func:`unless_missing`).

    ``fenced`` (remember, correct) also builds the config's session store,
    where erasures are recorded, and fences the manager's writes with it
    (:func:`~agentium_harness._engine.memory_fence.fence_memory`). That store is only read, so
    it must exist: a built-in SQLite one whose database does not (or that is no database) is
    refused before anything is built (:func:`refuse_missing`; ``outcome`` ends the message),
    unless it is the memory store's own database. The memory database ``remember`` writes is
    created if it does not exist yet (a first fact); a folder or other file at its path is refused.
    """
    resolved = load_hiding(args)  # a store's error may repeat its options: main() hides them
    if fenced:
        # The fence only reads the session store, so it must exist: one at a mistyped path was
        # created empty, and its "no erasure under way" let a fact of a user being erased in.
        # A memory path holding a folder or other file is refused as early (it failed at the write).
        refuse_missing(resolved, ("session_store", "memory"), outcome, NEVER_WRITTEN, created_with="memory")
    if reading:
        resolved = reading_only(resolved)
    elif changing:
        resolved = unless_missing(resolved, "memory")
    component = resolved.memory
    if component is None:
        raise InvalidArgumentError(
            f'{args.config} has no [memory] section; add one (plugin = "sqlite") to manage memory'
        )
    store = build_component(component, resolved)  # bounded: a hung factory must not hang the command
    assert isinstance(store, MemoryStore)

    sessions = None
    if fenced:
        built = build_component(resolved.session_store, resolved)
        assert isinstance(built, SessionStore)
        sessions = built

    async def go() -> T:
        manager = MemoryManager(store, hooks=resolved.registry, owns_store=True)
        try:
            if sessions is not None:
                fence_memory(manager, sessions, resolved.limits.op_timeout_s)
            return await work(manager)
        finally:
            await manager.aclose()
            if sessions is not None:
                await close_owned((sessions,), resolved.limits.op_timeout_s)

    return run_async(go)


def _fact_json(fact: StoredFact) -> dict[str, Any]:
    f = fact.fact
    return {
        "fact_id": fact.fact_id,
        "revision": fact.revision,
        "status": fact.status.value,
        "text": f.text,
        "tenant": f.scope.tenant,
        "user": f.scope.user,
        "project": f.scope.project,
        "repository": f.scope.repository,
        "valid_from": None if f.valid_from is None else iso_utc(f.valid_from),
        "valid_until": None if f.valid_until is None else iso_utc(f.valid_until),
        "provenance": [{"session": r.session, "seq": r.seq, "digest": r.digest} for r in f.provenance],
        "recorded_at": iso_utc(fact.recorded_at),
    }


def _ack_json(ack: MemoryAck, hide: Callable[[str], str]) -> dict[str, Any]:
    return {
        "status": ack.status.value,
        "fact_id": ack.fact_id,
        "revision": ack.revision,
        "reason": hide(ack.reason),
        "durable": ack.durable,
        "notes": [hide(note) for note in ack.notes],
    }


def _show_facts(args: argparse.Namespace, facts: tuple[StoredFact, ...]) -> None:
    if args.json:
        print_json([_fact_json(f) for f in facts])
        return
    now = datetime.now().astimezone()
    for fact in facts:
        until = fact.fact.valid_until
        expired = " (expired)" if until is not None and until <= now else ""
        window = "" if until is None else f" until {iso_utc(until)}{expired}"
        where = "".join(
            f" {k}={v}"
            for k, v in (("project", fact.scope.project), ("repository", fact.scope.repository))
            if v
        )
        sys.stdout.write(f"{fact.fact_id} r{fact.revision} {fact.status.value}{where}{window}\n")
        sys.stdout.write(f"    {shown(fact.text[:200]) if fact.text else '(content removed)'}\n")
    if not facts:
        sys.stdout.write("no facts\n")


def _show_ack(args: argparse.Namespace, ack: MemoryAck) -> int:
    hide = hide_env(args)  # the reason and notes are the store's text: it may repeat its options
    if args.json:
        print_json(_ack_json(ack, hide))
    else:
        line = f"{ack.status.value}"
        if ack.fact_id is not None:
            line += f" {ack.fact_id} revision {ack.revision}"
        if ack.reason:
            line += f": {shown(hide(ack.reason))}"  # escaped as a fact's text is
        sys.stdout.write(line + "\n")
        for note in ack.notes:
            sys.stderr.write(f"  note: {shown(hide(note))}\n")
    return EXIT_REJECTED if not ack.ok else 0


def cmd_memory_list(args: argparse.Namespace) -> int:
    """List the current facts of a tenant and user, newest first (expired ones marked)."""
    scope = _scope(args)
    facts = _with_manager(args, lambda m: m.list(scope, args.limit), reading=True)
    _show_facts(args, facts)
    return 0


def cmd_memory_history(args: argparse.Namespace) -> int:
    """Show every revision of one fact (a forgotten fact's revisions have no text)."""
    scope = _scope(args)
    facts = _with_manager(args, lambda m: m.history(scope, args.fact_id), reading=True)
    _show_facts(args, facts)
    return 0


def cmd_memory_remember(args: argparse.Namespace) -> int:
    """Remember a fact; prints stored, duplicate or rejected (exit 1) with the reason.

    The memory database is created if it does not exist yet (a first fact). The session store,
    read for an erasure under way, must exist (unless it is the memory database itself): one that
    does not is refused (exit 2).
    """
    fact = _fact(args)
    return _show_ack(
        args,
        _with_manager(
            args, lambda m: m.remember_with_result(fact), fenced=True, outcome="nothing was stored"
        ),
    )


def cmd_memory_correct(args: argparse.Namespace) -> int:
    """Correct a fact: its next revision gets TEXT; the history keeps the old one.

    The session store, read for an erasure under way, must exist (unless it is the memory database
    itself): one that does not is refused (exit 2). A memory database that does not exist holds
    no fact to correct (exit 2).
    """
    fact = _fact(args)
    scope = _scope(args)
    return _show_ack(
        args, _with_manager(args, lambda m: m.correct(scope, args.fact_id, fact), fenced=True, changing=True)
    )


def cmd_memory_forget(args: argparse.Namespace) -> int:
    """Forget a fact: its content is removed and it is never injected again."""
    scope = _scope(args)
    return _show_ack(args, _with_manager(args, lambda m: m.forget(scope, args.fact_id), changing=True))


def _scope_args(parser: argparse.ArgumentParser) -> None:
    add_config_argument(parser, " (its [memory] section is used)")
    parser.add_argument("--tenant", required=True, help="tenant id")
    parser.add_argument("--user", required=True, help="user id")
    parser.add_argument("--project", default=None, help="narrow to a project")
    parser.add_argument("--repository", default=None, help="narrow to a repository")
    parser.add_argument("--json", action="store_true", help="print the JSON form")


def _validity_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--valid-from", default=None, help="ISO 8601 time the fact starts to hold")
    parser.add_argument("--valid-until", default=None, help="ISO 8601 time the fact stops holding")


def add_memory_commands(subparsers: Any, add_identity_args: Any = None) -> None:
    """Add ``agentium memory list|history|remember|correct|forget`` to the CLI's subparsers.

    ``add_identity_args`` is accepted for symmetry with the other command
    groups but not used: memory is scoped by tenant and user (no session).
    """
    parser = subparsers.add_parser("memory", help="list, remember, correct and forget memory facts")
    inner = parser.add_subparsers(dest="memory_command", metavar="SUBCOMMAND", required=True)
    listing = inner.add_parser("list", help="list current facts", description=cmd_memory_list.__doc__)
    _scope_args(listing)
    listing.add_argument("--limit", type=int, default=50, help="most facts to list (1..200, default 50)")
    listing.set_defaults(func=cmd_memory_list)
    history = inner.add_parser(
        "history", help="every revision of a fact", description=cmd_memory_history.__doc__
    )
    _scope_args(history)
    history.add_argument("fact_id", metavar="FACT_ID", help="the fact id")
    history.set_defaults(func=cmd_memory_history)
    remember = inner.add_parser("remember", help="remember a fact", description=cmd_memory_remember.__doc__)
    _scope_args(remember)
    _validity_args(remember)
    remember.add_argument("text", metavar="TEXT", help="the fact; - reads it from standard input (UTF-8)")
    remember.set_defaults(func=cmd_memory_remember)
    correct = inner.add_parser("correct", help="correct a fact", description=cmd_memory_correct.__doc__)
    _scope_args(correct)
    _validity_args(correct)
    correct.add_argument("fact_id", metavar="FACT_ID", help="the fact id")
    correct.add_argument(
        "text", metavar="TEXT", help="the corrected fact; - reads it from standard input (UTF-8)"
    )
    correct.set_defaults(func=cmd_memory_correct)
    forget = inner.add_parser("forget", help="forget a fact", description=cmd_memory_forget.__doc__)
    _scope_args(forget)
    forget.add_argument("fact_id", metavar="FACT_ID", help="the fact id")
    forget.set_defaults(func=cmd_memory_forget)
