"""Archiving evicted groups: the archive's append, and every receipt it returns checked.

A receipt says where the archive put a group and under which digest; the
commit keeps it (the snapshot's archived digests, the groups-archived event,
the recall index), so one that names another seq or digest is a contract
violation, never trusted.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import ContractViolationError
from .._history import MessageGroup
from .._observe import spans as observe
from .._ports.archive import ArchiveReceipt, HistoryArchive
from .._scope import SessionKey
from .._validators import exact_int
from .adapter_lists import adapter_method, listed
from .lifecycle import Ticket

__all__ = ["archive_groups", "checked_receipts"]


async def archive_groups(
    ticket: Ticket, archive: HistoryArchive, key: SessionKey, groups: Sequence[MessageGroup]
) -> tuple[ArchiveReceipt, ...]:
    """Append and check every receipt; a wrong receipt is a contract violation, not trusted."""
    with observe.stage("eviction", {"agentium.eviction.groups": len(groups)}):
        raw = await ticket.call(
            "archive append", lambda ctx: archive.append(key, groups, ctx), hops_only=(archive, "append")
        )
        # Read to one past the batch at most: an answer that never ends cannot hold the commit.
        given = listed(raw, len(groups), adapter_method("archive", archive, "append"), "receipts")
        return checked_receipts(groups, tuple(given))


def checked_receipts(
    groups: Sequence[MessageGroup], receipts: tuple[object, ...]
) -> tuple[ArchiveReceipt, ...]:
    """One receipt per group, in order, each with the group's seq and digest, or a contract violation."""
    if len(receipts) != len(groups):
        count = f"more than {len(groups)}" if len(receipts) > len(groups) else str(len(receipts))
        raise ContractViolationError(f"archive returned {count} receipt(s) for {len(groups)} group(s)")
    checked: list[ArchiveReceipt] = []
    for group, receipt in zip(groups, receipts, strict=True):
        if not isinstance(receipt, ArchiveReceipt):
            raise ContractViolationError(f"archive returned {type(receipt).__name__}, not an ArchiveReceipt")
        seq, digest = receipt.seq, receipt.digest
        if type(seq) is not int or type(digest) is not str:
            # A subclass is read as what it holds (its own ``__ne__`` could pass the comparison),
            # and the receipt kept (handed to hooks and the recall index) holds that.
            # Anything else is refused before it is compared (its own ``__ne__`` could say equal).
            exact_seq = exact_int(seq)
            if exact_seq is None or not isinstance(digest, str):
                raise ContractViolationError(
                    f"archive receipt for group {group.seq} holds a {type(seq).__name__} seq and a "
                    f"{type(digest).__name__} digest, not an int and a str"
                )
            seq, digest = exact_seq, str.__str__(digest)
            receipt = ArchiveReceipt(seq, digest, receipt.location)
        if seq != group.seq or digest != group.digest:
            raise ContractViolationError(
                f"archive receipt for group {group.seq} says seq {seq} digest {digest!r:.80}; "
                f"expected digest {group.digest}"
            )
        checked.append(receipt)
    return tuple(checked)
