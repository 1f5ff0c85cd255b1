"""A session create settles past the revision floor: the S3 session store's race with another process's erase.

A create reads the floor (:mod:`.revision_floor`) and writes revision
floor + 1 with ``IfNoneMatch="*"``; S3 cannot make the two one step. An
erase of the same id in another process (:mod:`.sessions_erase`) lists the
old snapshot, reads its revision R, raises the floor to R durably, and only
then deletes the snapshot. When that erase falls between the create's floor
read and its write, the write finds the key absent and lands at a revision
at or below R: one the erased session had, which a compare-and-set holder
of the erased session could take for its own (ABA).

So after the create lands, :func:`settle_past_floor` reads the floor again.
That one read always sees such an erase:

1. a create-only write lands only on an absent key, so the erase's delete
   came before the write;
2. the erase raised the floor before it deleted, durably. The order matters:
   deleting first would leave a moment with the snapshot gone and the floor
   still low, and a re-read in that moment would miss the raise;
3. the re-read comes after the write, S3 reads are strongly consistent
   (read-after-write, overwrites included: AWS since December 2020, Ceph
   RGW, moto), and the floor only ever rises.

When the floor is at or past the created revision, the same snapshot is
written again at floor + 1 with ``IfMatch`` on the ETag the create (or the
previous move) returned: a writer that changed the session meanwhile is
never overwritten, the move is refused instead. Then the floor is read again,
until it is below the session's revision, within ``_MOVES`` moves and the
save's deadline. Later rises come from erasures after the create (of other
sessions: the floor is store-wide; or of this one); following them is not
needed for the guarantee, but harmless, and keeps the rule simple: a create
returns only a revision above the last floor it read. The cost is one floor
``GET`` per create (a 404 in a store that never erased anything).

Whatever cannot be settled raises :class:`~.errors.S3CreateUnsettledError`,
which is only raised after the create landed, so it says the create's
write landed (a read-back tells whether it still stands): another writer
changed or erased the session before the move, the move failed or its
outcome is unknown, the floor kept rising, or the deadline passed.

Between the create's write and its move (one ``GET`` and one ``PUT``,
milliseconds) the new session is visible at the repeated revision. A stale
holder of the erased session at exactly that revision is refused all the
same (``SessionConflictError``, nothing written):

- one whose store has the ETag cached sends it, and the new object's
  differs (unless the bodies are byte-identical);
- one whose store has none reads the header, finds its revision, and would
  take the new object's ETag. So a save that must look the ETag up reads
  the floor too, after the header, and refuses when its expected revision
  is at or below it (:func:`below_floor`). The header read saw the create's
  write, which landed after the erase raised the floor: this floor read sees
  the raise. It costs that path one ``GET``; saves with the ETag cached
  (every save after a load or save of the same store) pay nothing. Because
  the floor is store-wide, such a save of an older session whose revision
  is below it (another session's erasure raised it) is refused too: a load
  first (which caches the ETag) lets it through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import botocore.exceptions

from agentium_harness import AgentiumError
from agentium_harness.plugin_api import SessionKey

from .config import S3Config
from .errors import S3CreateUnsettledError
from .link import S3Client, error_code
from .observe import CREATE_MOVED, degraded
from .revision_floor import read_floor
from .snapshot_format import MAX_REVISION, snapshot_body

__all__ = ["ERASING", "below_floor", "settle_past_floor", "unsettled"]

#: Moves past the floor before giving up: each one follows an erasure that raised it meanwhile.
_MOVES: Final = 16

#: Why a create met an object that reads as no session: an erasure's tombstone, not yet deleted.
ERASING: Final = (
    "an erasure of it is under way (its snapshot is replaced by a tombstone until it is deleted; if no "
    "erasure is running, one stopped there: erase the session again to finish it)"
)


def below_floor(expected: int, floor: int) -> str:
    """Why a save that had to look up the ETag of revision ``expected`` is refused (see the module)."""
    return (
        f"revision {expected} is at or below the revision floor ({floor}), so it may be a session created "
        "again after an erasure rather than the one this caller holds; load the session and save over "
        "what the load returns"
    )


#: ``move(body, expected_revision, etag)``: ``body`` written over that revision; returns its ETag.
Move = Callable[[bytes, int, str], str]


def unsettled(key: SessionKey, revision: int, floor: int | None, why: str) -> S3CreateUnsettledError:
    """The error of a create that landed at ``revision`` and could not be settled past ``floor``."""
    seen = "" if floor is None else f" (it read {floor})"
    return S3CreateUnsettledError(
        f"s3 session store: session {key.key()} was created (that write landed, though a writer or erasure "
        "may have replaced it since) and last written by this "
        f"save at revision {revision}, but an erasure in another process may have raised the revision floor "
        f"to or past that revision meanwhile{seen}, so it may be one an erased session had; settling it past "
        f"the floor failed: {why}. "
        "Load the session before using it, and save over what the load returns",
        revision=revision,
        floor=floor,
    )


def _cause(exc: BaseException) -> str:
    """What failed, for the message: the plugin's own text, or botocore's class and S3 code (not its text)."""
    if isinstance(exc, AgentiumError):
        # Its claim is about this step only: the create before it did write.
        return str(exc).replace("nothing was written", "this step wrote nothing")
    code = error_code(exc)
    return f"{type(exc).__name__}{' ' + code if code else ''}"


def settle_past_floor(
    s3: S3Client,
    config: S3Config,
    key: SessionKey,
    data: bytes,
    created: tuple[int, str],
    move: Move,
    landed: Callable[[int, str], None],
    check: Callable[[], None],
) -> tuple[int, str]:
    """The revision and ETag of a create that landed at ``created``, settled above the floor (worker thread).

    Moves the session's ``data`` past the floor with ``move`` while the floor
    is at or above its revision (see the module); ``landed`` is told each
    move that landed, ``check`` runs before each step (the deadline).

    :raises S3CreateUnsettledError: it could not be settled; the create's write landed.
    """
    revision, etag = created
    floor: int | None = None
    for _ in range(_MOVES):
        step = "reading the floor"
        try:
            check()
            floor = read_floor(s3, config)[0]
            if floor < revision:
                return revision, etag
            target = floor + 1
            if target > MAX_REVISION:
                raise unsettled(key, revision, floor, "the floor is at the highest revision a header holds")
            degraded(
                CREATE_MOVED,
                {},
                "session create raced an erasure (the revision floor rose): moving it past the floor",
            )
            step = f"moving it to revision {target} (on the ETag of revision {revision})"
            check()
            etag = move(snapshot_body(target, data), revision, etag)
        except S3CreateUnsettledError:
            raise
        except (AgentiumError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            # botocore's text is the server's: only its class and code are shown (as the link does).
            why = f"{step} failed: {_cause(exc)}"
            raise unsettled(key, revision, floor, why) from (exc if isinstance(exc, AgentiumError) else None)
        revision = target
        landed(revision, etag)
    raise unsettled(key, revision, floor, f"the floor kept rising past it ({_MOVES} moves)")
