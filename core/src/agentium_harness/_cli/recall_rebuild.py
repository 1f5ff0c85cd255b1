"""``agentium recall rebuild``: a session's archived groups re-indexed into the recall store.

Apart from :mod:`~agentium_harness._cli.recall` (``recall add`` and ``recall search``), which
was at the 600-line bound; the recall store lookup both use is here.
"""

from __future__ import annotations

import argparse
import sys

from .._config.runtime import build_runtime
from .._engine.adapter_lists import adapter_method, bounded_list
from .._engine.embedding import embedding_text, index_sources
from .._engine.group_identity import split_foreign
from .._engine.lifecycle import Ticket
from .._engine.runtime import HarnessRuntime
from .._errors import CapabilityError, ContractViolationError, InvalidArgumentError
from .._history import MessageGroup
from .._ports import OpContext
from .._ports._base import capabilities_of
from .._ports.archive import ArchiveReceipt
from .._ports.recall import RecallStore, SourceRef, group_source_id
from .._scope import SessionKey
from .interrupt import run_async
from .output import load_hiding, print_json, unless_missing

__all__ = ["REBUILD_PAGE", "cmd_recall_rebuild", "recall_store"]

#: Archived groups read per page by ``recall rebuild``.
REBUILD_PAGE = 200


def recall_store(runtime: HarnessRuntime, flag: str | None = None) -> RecallStore:
    """The runtime's recall store, refused when there is none or it does not declare ``flag``."""
    store = runtime.recall
    if store is None:
        raise InvalidArgumentError("the config has no [recall] section; nothing to do")
    if flag is not None and not getattr(capabilities_of(store), flag, False):
        raise CapabilityError(f"recall store {type(store).__name__} does not declare {flag}")
    return store


def cmd_recall_rebuild(args: argparse.Namespace) -> int:
    """Re-index a session's archived groups from the archive into the recall store (idempotent)."""
    key = SessionKey(args.tenant, args.user, args.session)
    # No archived group in an archive database that does not exist: 0 indexed, and none is created.
    runtime = build_runtime(unless_missing(load_hiding(args), "archive"))
    total = 0
    refused: list[int] = []

    async def go() -> None:
        nonlocal total
        async with runtime:
            store = recall_store(runtime, "archive_indexing")
            start = 0
            while True:
                ctx = OpContext.with_timeout(30.0)
                raw = await runtime.archive.read_groups(key, start, REBUILD_PAGE, ctx)
                # Read to one past the page at most, each a group: nothing is indexed from an answer
                # over its bound, or one that never ends (ContractViolationError).
                page = bounded_list(
                    raw,
                    REBUILD_PAGE,
                    adapter_method("archive", runtime.archive, "read_groups"),
                    "groups",
                    MessageGroup,
                )
                if not page:
                    return
                last = page[-1].seq
                if type(last) is not int or last < start:
                    # A page that does not move past ``start`` would be read again without end.
                    raise ContractViolationError(
                        f"archive {type(runtime.archive).__name__}.read_groups from seq {start} returned a "
                        "page ending below it; the rebuild stopped there"
                    )
                start = last + 1
                # Only groups that prove they are this session's go into its recall scope (the store
                # lets a group with no retained record through): a group an archive answered with
                # that is another session's, stripped of its record, is passed over and named.
                page, foreign = split_foreign(key, page)
                refused.extend(foreign)
                if not page:
                    continue
                # The archive checked each group against its stored digest when it read it.
                receipts = [ArchiveReceipt(g.seq, g.digest, "rebuild") for g in page]
                total += await store.index_groups(key, page, receipts, OpContext.with_timeout(30.0))
                if runtime.hybrid is not None:  # hybrid recall: (re)embed what was indexed
                    ticket = Ticket(key, "recall rebuild", runtime.limits.op_timeout_s)
                    sources = [
                        (SourceRef(group_source_id(key, g.seq), g.digest), embedding_text(g)) for g in page
                    ]
                    await index_sources(ticket, runtime.hybrid, store, sources)

    run_async(go)
    if refused:
        sys.stderr.write(
            f"warning: {len(refused)} group(s) the archive returned cannot be shown to be this session's "
            f"(seqs {', '.join(map(str, refused[:20]))}{' ...' if len(refused) > 20 else ''}); "
            "they were not indexed\n"
        )
    if args.json:
        print_json({"tenant": key.tenant, "user": key.user, "session": key.session, "newly_indexed": total})
    else:
        sys.stdout.write(f"{total} group(s) newly indexed for session {args.session!r}\n")
    return 0
