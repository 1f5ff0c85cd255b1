"""``agentium recall``: index host documents, search as a run would (rebuild: :mod:`.recall_rebuild`).

Every command builds the runtime a config file describes and uses its recall
store, so what ``search`` shows is exactly what a run in that scope would
include: it goes through the engine's own recall round (scope and budget
checks, whole assembly, validation), not around it.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import anyio.to_thread

from .._config.runtime import build_runtime
from .._engine.document_api import MAX_DOCUMENT_BYTES
from .._engine.document_fence import index_document_fenced
from .._engine.embedding import index_sources
from .._engine.erasure_fence import ErasureFence
from .._engine.history_view import recall_hidden
from .._engine.lifecycle import Ticket
from .._engine.load import load_session
from .._engine.recall import Evidence, gather_evidence
from .._engine.recall_policy import QueryInput
from .._engine.recall_readback import session_groups
from .._engine.results import CommitState
from .._errors import (
    AgentiumError,
    InvalidArgumentError,
    OperationTimeoutError,
)
from .._ports import OpContext
from .._ports.recall import SourceOwner
from .._scope import RecallScope, Scope, validate_id
from .hiding import hidden_evidence
from .interrupt import run_async
from .output import (
    NEVER_WRITTEN,
    hide_env,
    load_hiding,
    print_json,
    reading_only,
    refuse_missing,
    shown,
    text_argument,
)
from .recall_rebuild import cmd_recall_rebuild, recall_store

__all__ = ["MAX_DOCUMENT_BYTES", "add_recall_commands"]


def _files(paths: list[str]) -> tuple[list[tuple[str, Path]], list[Path]]:
    """``(doc id, path)`` for every file named or under a folder named, and the links passed over.

    Ids are relative to what was given. A symbolic link under a folder is not read (nor, for a
    folder, walked): it may point anywhere the command can read, and what it points at would be
    indexed into the tenant's recall, where its runs quote it. A PATH that is a link is read: the
    operator named it.

    Two different files that would get the same id are refused before anything is written: the
    second replaced the first in the store (``docsA/readme.md`` and ``docsB/readme.md`` are both
    ``readme.md``) while the count said both were indexed. The same file reached twice under one
    id is one document.
    """
    found: list[tuple[str, Path]] = []
    links: list[Path] = []
    for given in paths:
        root = Path(given)
        try:
            mode = root.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            raise InvalidArgumentError(f"{given}: no such file or folder; nothing was indexed") from None
        except OSError as exc:  # too long a name, a loop of links: Path.exists() raised these
            raise InvalidArgumentError(
                f"{given}: cannot be read ({exc.strerror or exc}); nothing was indexed"
            ) from None
        if stat.S_ISREG(mode):
            found.append((root.name, root))
            continue
        if not stat.S_ISDIR(mode):  # a device, a FIFO or a socket: walking it found nothing, silently
            raise InvalidArgumentError(f"{given}: not a file or a folder; nothing was indexed")
        for path in sorted(root.rglob("*")):
            if path.is_symlink():  # rglob walks no linked folder; a linked file it yielded
                links.append(path)
            elif path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    unique: dict[str, Path] = {}
    for doc_id, path in found:
        validate_id(doc_id, "document id")
        first = unique.setdefault(doc_id, path)
        if first is not path and not _same_file(first, path):
            raise InvalidArgumentError(
                f"{shown(str(first))} and {shown(str(path))} would both be document id {doc_id!r}, "
                "and the second would replace the first; give a folder that holds both, so their "
                "ids differ. Nothing was indexed"
            )
    return list(unique.items()), links


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:  # removed since the walk: not shown to be the same file
        return False


#: How a document is opened: never waiting (``O_NONBLOCK``: a FIFO opens at once, with or without a
#: writer, and is then refused by its ``fstat``), and in binary on platforms that distinguish it.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)

#: Added for a file found in a folder walk: a symbolic link swapped in since the walk is not followed.
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)

#: Added when a folder on a walked file's path is opened: it must still be a folder.
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

#: What a path that is not a regular file is, by its ``st_mode``, for the "skipped" note.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class _Skipped(Exception):
    """A document that is not read: the reason, for the "skipped" note."""


#: Whether a walked file can be opened folder by folder from its root (``openat``), none followed.
_BY_FOLDER = os.open in os.supports_dir_fd and bool(_NO_FOLLOW)


def _open_walked(path: Path, doc_id: str) -> int:
    """Open walked file ``path`` (``root / doc_id``) from its root, one part at a time, no link followed.

    ``O_NOFOLLOW`` guards only a path's last part: a folder between the root and the file swapped
    for a link after the walk was followed out of the folder. So each folder below the root is
    opened relative to the one above it (``dir_fd``) with ``O_NOFOLLOW``, and the file relative to
    its folder; the root itself is followed (the operator named it).

    :raises _Skipped: a part is a link now, or cannot be opened.
    """
    parts = PurePosixPath(doc_id).parts
    if not _BY_FOLDER or tuple(path.parts[-len(parts) :]) != parts:  # not root / doc_id: last part only
        return _opened(path, _OPEN_FLAGS | _NO_FOLLOW, None, last=True)
    root = Path(*path.parts[: len(path.parts) - len(parts)])
    folder = _opened(root, os.O_RDONLY | _DIRECTORY, None, last=False)
    try:
        for part in parts[:-1]:
            inner = _opened(part, os.O_RDONLY | _DIRECTORY | _NO_FOLLOW, folder, last=False)
            os.close(folder)
            folder = inner
        return _opened(parts[-1], _OPEN_FLAGS | _NO_FOLLOW, folder, last=True)
    finally:
        os.close(folder)


def _opened(name: str | Path, flags: int, folder: int | None, *, last: bool) -> int:
    """``os.open(name, flags, dir_fd=folder)``; a link where none may be, or a failure: :class:`_Skipped`."""
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        link = exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and folder is not None and not last)
        if link and flags & _NO_FOLLOW:
            if last:
                raise _Skipped("a symbolic link now (found as a file); not followed") from None
            raise _Skipped("a folder on its path is a symbolic link now; not followed") from None
        raise _Skipped(f"cannot be read: {exc.strerror or exc}") from None


def _read_document(path: Path, doc_id: str, *, follow: bool) -> bytes:
    """At most one byte past :data:`MAX_DOCUMENT_BYTES` of the regular file at ``path``.

    The walk saw a regular file, but what is there when it is read may have changed since: a FIFO
    opened plainly waited for a writer for good, a device was read as a document, and a link was
    followed out of the folder. So the file is opened without waiting and, for a walked file
    (``follow`` false), without following a link, neither the file nor a folder between the root
    and it (:func:`_open_walked`); then the opened descriptor itself must be a regular file, so
    what is read is what was checked.

    :raises _Skipped: not read (cannot be opened or read, a link now, not a regular file).
    """
    fd = _opened(path, _OPEN_FLAGS, None, last=True) if follow else _open_walked(path, doc_id)
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise _Skipped(f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise _Skipped(f"not a regular file ({kind}); not read")
    try:
        with open(fd, "rb") as handle:  # closes fd
            return handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise _Skipped(f"cannot be read: {exc.strerror or exc}") from None


#: The deadline of one document's read, in seconds: a file on a stalled network share (or any read
#: that blocks) is walked away from and skipped, never waited on for good.
READ_TIMEOUT_S = 30.0


async def _read_off_loop(ticket: Ticket, path: Path, doc_id: str, *, follow: bool) -> bytes:
    """:func:`_read_document` in a worker thread, under ``ticket``'s deadline (:data:`READ_TIMEOUT_S`).

    The opens, the ``fstat`` and the read (up to one byte past :data:`MAX_DOCUMENT_BYTES`) block
    the thread they run on: on the event loop they stalled every task of it (the fence, the
    store's calls, a progress line) for as long as the file system took. In a worker thread that
    abandons on cancellation, under the engine's call deadline, a read past it is abandoned (its
    late bytes discarded) and the file skipped like one that cannot be read. The read itself runs
    in a daemon thread (:func:`_in_daemon`), so one that never returns cannot hold the exit.

    :raises _Skipped: not read (as :func:`_read_document`, or past the deadline).
    """
    timeout_s = READ_TIMEOUT_S

    def work(_ctx: OpContext) -> Awaitable[bytes]:
        # _read_document is looked up at each call (not bound once): the module's one reader.
        read = partial(_read_document, path, doc_id, follow=follow)
        return anyio.to_thread.run_sync(partial(_in_daemon, read, timeout_s), abandon_on_cancel=True)

    try:
        return await ticket.call("read document", work, timeout_s=timeout_s, traced=False)
    except OperationTimeoutError:
        raise _Skipped(f"not read within {timeout_s}s (abandoned); not indexed") from None


def _in_daemon(read: Callable[[], bytes], timeout_s: float) -> bytes:
    """``read()`` in a daemon thread of its own, waited for at most ``timeout_s`` by the calling thread.

    anyio's worker threads are not daemons: one left in a read that never returns (a hard-mounted
    share gone away) kept the process from exiting once the command was done, for good. The read
    runs in a daemon instead, which never holds the exit; the worker thread only waits for it, up
    to the deadline, and so always ends. A read past it is abandoned and what it returns discarded.

    :raises _Skipped: as :func:`_read_document`, or not read within ``timeout_s``.
    """
    outcome: list[bytes | BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append(read())
        except BaseException as exc:  # handed to the waiting thread; nothing escapes this one
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="agentium-recall-add-read", daemon=True).start()
    if not done.wait(timeout_s):
        raise _Skipped(f"not read within {timeout_s}s (abandoned); not indexed")
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    return result


class _Progress:
    """A one-line progress counter on stderr, only when stderr is a terminal."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.on = sys.stderr.isatty() and total > 20

    def step(self, done: int) -> None:
        if self.on:
            sys.stderr.write(f"\r  indexing {done}/{self.total}")
            sys.stderr.flush()

    def end(self) -> None:
        if self.on:
            sys.stderr.write("\n")


def cmd_recall_add(args: argparse.Namespace) -> int:
    """Index host documents (files, or folders walked recursively) into the configured recall store.

    The recall store is created if its database does not exist yet (a first document). The session
    store, which the command only reads (for an erasure of the owner under way), must exist, unless
    it is the recall store's own database (one file for both, created with the first document).
    """
    owner = SourceOwner(args.tenant, args.user, None, args.project, args.repository)
    files, links = _files(args.paths)  # every id is checked before anything is written
    named = {Path(given) for given in args.paths}  # a PATH that is a link is read: the operator named it
    resolved = load_hiding(args)
    # The erasure fence reads the session store: one at a mistyped path was created empty, and its
    # "no erasure under way" let a user being erased get the document anyway. Refused instead; and
    # a recall path holding a folder or other file failed only at the first document, as "not known".
    refuse_missing(
        resolved, ("session_store", "recall"), "nothing was indexed", NEVER_WRITTEN, created_with="recall"
    )
    runtime = build_runtime(resolved)
    hide = hide_env(args)
    counts = {"indexed": 0, "skipped": len(links)}
    for link in links:
        sys.stderr.write(
            f"  skipped {shown(str(link))}: a symbolic link (it may point outside the folder; "
            "give what it points at as a PATH to index it)\n"
        )
    # The file being indexed, and whether the store took it (its vector may still fail).
    at: dict[str, Any] = {"done": 0, "taken": False}

    async def go() -> None:
        async with runtime:
            store = recall_store(runtime, "document_indexing")
            fence = ErasureFence(runtime.session_store, runtime.limits.op_timeout_s)
            progress = _Progress(len(files))
            for done, (doc_id, path) in enumerate(files, start=1):
                at.update(done=done, doc_id=doc_id, path=path, taken=False)
                ticket = Ticket(None, "recall add", runtime.limits.op_timeout_s)
                # At most one byte past the bound is read, off the event loop: a huge file is
                # skipped, never loaded. A skipped file's name is the folder's text, escaped like a
                # document's lines.
                try:
                    data = await _read_off_loop(ticket, path, doc_id, follow=path in named)
                except _Skipped as why:
                    # Unreadable (permissions, removed since the walk), or no longer a regular file:
                    # skipped like a binary file, and the command goes on to the next file, not a
                    # traceback (or a wait without end) half-way with the files before it indexed.
                    counts["skipped"] += 1
                    sys.stderr.write(f"  skipped {shown(str(path))}: {shown(str(why))}\n")
                    continue
                if len(data) > MAX_DOCUMENT_BYTES or b"\0" in data:
                    counts["skipped"] += 1
                    sys.stderr.write(
                        f"  skipped {shown(str(path))}: binary or larger than {MAX_DOCUMENT_BYTES} bytes\n"
                    )
                    continue
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    counts["skipped"] += 1
                    sys.stderr.write(f"  skipped {shown(str(path))}: not UTF-8 text\n")
                    continue
                # Fenced like a memory write: refused while an erasure of the owner is pending, and
                # deleted again (and refused) if one began while it was written (docs/erasure.md).
                ref, notes = await index_document_fenced(
                    fence, ticket, store, owner, doc_id, text, title=doc_id, timeout_s=30.0
                )
                at["taken"] = True
                counts["indexed"] += 1  # in the store, whatever becomes of its vector
                # Hidden and escaped like every note a command prints: one may quote the store.
                for note in notes:
                    sys.stderr.write(f"  warning: {shown(str(path))}: {shown(hide(note))}\n")
                if runtime.hybrid is not None:  # hybrid recall: the document's vector goes in beside it
                    await index_sources(ticket, runtime.hybrid, store, [(ref, text)])
                progress.step(done)
            progress.end()
            at["finished"] = True  # an error from here on (closing the runtime) came after every file

    try:
        run_async(go)
    except AgentiumError as exc:
        if at["done"]:
            # main() reports the error; what the documents before it became must be said too.
            sys.stdout.write(", ".join(f"{v} {k}" for k, v in counts.items()) + "\n")
            sys.stderr.write(_stopped(at, counts["indexed"], len(files), exc) + "\n")
        raise
    sys.stdout.write(", ".join(f"{v} {k}" for k, v in counts.items()) + "\n")
    return 0


def _stopped(at: dict[str, Any], indexed: int, total: int, exc: AgentiumError) -> str:
    """What a ``recall add`` that failed at file ``at`` left: the documents before it stay indexed."""
    after = total - at["done"]
    indexed -= 1 if at["taken"] else 0  # counted already: the store took it
    if at.get("finished"):
        return f"  every file was indexed or skipped as counted ({indexed} indexed); the error came after"
    if at["taken"]:  # the store took it; its vector (hybrid recall) failed
        this = f"it was indexed, without its vector; the {after} file(s) after it were not indexed"
    elif exc.commit_state is CommitState.UNKNOWN:
        this = f"whether it was indexed is not known; the {after} file(s) after it were not indexed"
    elif exc.commit_state is CommitState.COMMITTED:
        this = f"it was indexed; the {after} file(s) after it were not indexed"
    else:
        this = f"it and the {after} file(s) after it were not indexed"
    return (
        f"  stopped at {shown(str(at['path']))} (document id {shown(repr(at['doc_id']))}, "
        f"file {at['done']} of {total}): the {indexed} document(s) indexed before it stay indexed; {this}"
    )


def _search_scope(args: argparse.Namespace) -> Scope:
    scope = RecallScope(args.project, args.repository)
    return Scope(args.tenant, args.user, args.session, scope.project, scope.repository)


def cmd_recall_search(args: argparse.Namespace) -> int:
    """Show what recall would include for QUERY in a scope: candidates, excerpts, status and budget use."""
    query = text_argument(args.query, "the QUERY argument", "nothing was searched")
    if not query.strip():
        raise InvalidArgumentError("the query is empty; give the words to search for")
    scope = _search_scope(args)
    runtime = build_runtime(reading_only(load_hiding(args)))  # a search creates no database

    async def go() -> Evidence:
        async with runtime:
            store = recall_store(runtime)
            key = scope.session_key
            ticket = Ticket(key, "recall search", runtime.limits.op_timeout_s)
            # The session's view hides what it cleared or retracted: a run leaves those groups
            # out, so the search that shows what a run would include must too.
            _, snap = await load_session(ticket, runtime.session_store, key, None, attest_legacy=False)
            return await gather_evidence(
                ticket,
                store,
                scope,
                runtime.recall_limits,
                runtime.recall_policy,
                QueryInput(query),
                hidden=recall_hidden(key, snap.view, snap.erased),
                groups=session_groups(ticket, runtime.archive, runtime.session_store, key, snap),
            )

    evidence = hidden_evidence(run_async(go), hide_env(args))  # its problems may quote the store's errors
    u = evidence.usage
    limits = runtime.recall_limits
    if args.json:
        budget = {
            "queries": [u.queries, limits.max_queries],
            "candidates": [u.candidates, limits.max_candidates],
            "discovery_bytes": [u.discovery_bytes, limits.max_discovery_bytes],
            "source_bytes": [u.source_bytes, limits.max_source_bytes],
            "evidence_tokens": [u.evidence_tokens, limits.max_evidence_tokens],
            "validations": [u.validations, limits.max_validations],
            "readback_bytes": [u.readback_bytes, limits.max_readback_bytes],
        }
        blocks = [
            {"source_id": block.source_id, "attributes": dict(block.attributes), "content": block.content}
            for block in evidence.blocks
        ]
        print_json(
            {
                "status": evidence.status.value,
                "query": evidence.query,
                "sources": blocks,
                "omitted": list(evidence.omitted),
                "problems": [str(p) for p in evidence.problems],
                "budget": budget,
                "latency_ms": round(u.latency_s * 1000, 1),
            }
        )
        return 0
    out = sys.stdout
    out.write(f"status {evidence.status.value}, query {evidence.query[:80]!r}\n")
    for block in evidence.blocks:
        attrs = dict(block.attributes)
        # The store's text (ids, attributes, excerpts, problems quoting its errors): escaped, so none
        # of it reaches the terminal as an escape sequence or a forged line.
        out.write(
            shown(
                f"  [{attrs.get('rank')}] {block.source_id} revision {attrs.get('revision')} "
                f"completeness {attrs.get('completeness')} omitted-context {attrs.get('omitted-context')}"
            )
            + "\n"
        )
        for line in block.content.splitlines()[:6]:
            out.write(f"      {shown(line[:160])}\n")
    for source_id in evidence.omitted:
        out.write(f"  omitted (did not fit whole): {shown(source_id)}\n")
    for problem in evidence.problems:
        out.write(f"  problem: {shown(str(problem))}\n")
    out.write(
        f"budget: queries {u.queries}/{limits.max_queries}, "
        f"candidates {u.candidates}/{limits.max_candidates}, "
        f"discovery bytes {u.discovery_bytes}/{limits.max_discovery_bytes}, "
        f"source bytes {u.source_bytes}/{limits.max_source_bytes}, "
        f"evidence tokens {u.evidence_tokens}/{limits.max_evidence_tokens}, "
        f"validations {u.validations}/{limits.max_validations}, "
        f"read-back bytes {u.readback_bytes}/{limits.max_readback_bytes}, "
        f"latency {u.latency_s * 1000:.1f} ms\n"
    )
    return 0


def add_recall_commands(subparsers: Any, add_config: Any) -> None:
    """Add ``agentium recall add|search|rebuild`` to the CLI's subparsers."""
    parser = subparsers.add_parser("recall", help="index documents, search, rebuild the recall index")
    inner = parser.add_subparsers(dest="recall_command", metavar="SUBCOMMAND", required=True)
    add = inner.add_parser("add", help="index host documents", description=cmd_recall_add.__doc__)
    # Required here: with PATH... after it, an optional CONFIG would take the first path.
    add.add_argument("config", metavar="CONFIG", help="path of the TOML config file")
    add.add_argument("--tenant", required=True, help="owning tenant id")
    add.add_argument("--user", default=None, help="narrow to one user (default: the whole tenant)")
    add.add_argument("--project", default=None, help="narrow to one project")
    add.add_argument("--repository", default=None, help="narrow to one repository")
    add.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    add.set_defaults(func=cmd_recall_add)
    search = inner.add_parser(
        "search", help="show what recall would include", description=cmd_recall_search.__doc__
    )
    add_config(search)
    search.add_argument(
        "query", metavar="QUERY", help="the query text; - reads it from standard input (UTF-8)"
    )
    search.set_defaults(func=cmd_recall_search)
    rebuild = inner.add_parser(
        "rebuild", help="re-index archived groups", description=cmd_recall_rebuild.__doc__
    )
    add_config(rebuild)
    rebuild.set_defaults(func=cmd_recall_rebuild)
