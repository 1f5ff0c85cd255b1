"""The error of a call whose erasure another call completed, when the target may still hold data.

Apart from :mod:`._errors` (re-exported by the package) only to keep that
module short; it is one of the same hierarchy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import ErasureIncompleteError

if TYPE_CHECKING:
    from ._ports.erasure import ErasureRecord

__all__ = ["ErasureOvertakenError"]


class ErasureOvertakenError(ErasureIncompleteError):
    """The call's erasure is complete, but the target may still hold data written after it.

    Another call (a concurrent ``agentium erase --resume``) completed this
    call's erasure while it ran, lifting the fence; what the target held
    afterwards (written before this call returns) is this call's to erase,
    under a new erasure of its own, and that could not be done:

    - ``pending_id`` names an overlapping erasure that is pending and refused
      a new one (complete it with ``resume_erasures``, then erase the target
      again); it is empty when there was none;
    - or the new erasures this call started were completed by other calls
      too, as many times as it tries, or a new one could not be started
      (the error's cause says why); ``pending_id`` is empty then, unless
      the pending erasures, read back once, hold one overlapping the target
      (the new one's join may have landed though it raised): it names
      that one (``erasure_status`` shows whether one is pending when even
      that read failed, as the message then says);
    - or checking what the target holds since failed (the error's cause):
      ``still_held`` is empty, and whether it holds anything is not known.

    ``record`` is the tombstone of the last erasure the call saw complete
    (``state`` complete: it stands, and is not to be resumed);
    ``still_held`` names the stores that still held something of the target
    when last asked. The data may still be there: erase the target again.
    """

    def __init__(
        self,
        message: str,
        record: ErasureRecord | None = None,
        *,
        pending_id: str = "",
        still_held: tuple[str, ...] = (),
    ) -> None:
        self.pending_id = pending_id
        self.still_held = still_held
        super().__init__(message, record)
