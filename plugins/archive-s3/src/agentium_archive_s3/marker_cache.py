"""Markers a read has verified already, so a read behind many erased groups does not HEAD each every time.

Every empty object a read lists must be exactly an erasure's marker, which
takes one ``HEAD`` (:mod:`.markers`): a session behind 200 erased groups
cost 200 ``HEAD`` requests on every read. Each archive keeps, in process,
the markers it verified, keyed by what the listing shows of the object:
its key, ETag and ``LastModified`` (to the second, the coarsest precision
servers give). A listed empty object whose key, ETag and second match an
entry is passed without a ``HEAD``; anything else is checked as before.

**Why a replacement is still caught.** Every empty object has the same
ETag (the MD5 of nothing), whatever its metadata, so only ``LastModified``
tells a marker from an empty object put at its key later; and it only
counts seconds. An entry is therefore kept only once the server's own
clock (the ``HEAD`` reply's ``Date``) is at least :data:`SETTLED` past the
marker's ``LastModified``: any object put at the key after that ``HEAD``
has a later ``LastModified`` second, so its listing misses the entry and
it is checked (damage fails the read closed). The ``HEAD`` must also show
the very object listed (same ETag and second); a reply without a ``Date``
is never kept. A marker read within :data:`SETTLED` of its erasure is
checked on every read until then.

The cache is bounded (:data:`VERIFIED_MARKERS` entries, least recently
used dropped first) and thread-safe: reads check it on the event loop and
fill it from worker threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Final

from .link import unquote_etag
from .markers import MarkerHead

__all__ = ["SETTLED", "VERIFIED_MARKERS", "VerifiedMarkers"]

#: Entries one archive keeps (an entry is about 200 bytes).
VERIFIED_MARKERS: Final = 4096
#: How far past a marker's ``LastModified`` the server's clock must be before it is kept.
#: One second is the timestamps' precision; the second more allows for servers whose
#: front ends' clocks differ slightly.
SETTLED: Final = timedelta(seconds=2)

_Stamp = tuple[str, str, int]


def _second(moment: datetime) -> int:
    """``moment`` as whole seconds since the epoch (listings may give milliseconds, ``HEAD`` does not)."""
    return int(moment.timestamp()) if moment.tzinfo is not None else -1


class VerifiedMarkers:
    """Exact markers an archive has verified, keyed by object key, ETag and ``LastModified`` second."""

    def __init__(self, bound: int = VERIFIED_MARKERS) -> None:
        self._bound = bound
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Stamp, None] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def known(self, object_key: str, etag: str, modified: datetime | None) -> bool:
        """True if the listed empty object ``object_key`` is a marker verified before, unchanged since."""
        if modified is None or modified.tzinfo is None:
            return False
        stamp = (object_key, unquote_etag(etag), _second(modified))
        with self._lock:
            if stamp not in self._entries:
                return False
            self._entries.move_to_end(stamp)
            return True

    def note(self, object_key: str, etag: str, modified: datetime | None, head: MarkerHead) -> None:
        """Keep the listed object ``object_key`` as verified, if ``head`` (its check) vouches for it.

        Only an exact marker whose ``HEAD`` showed the object listed (same
        ETag and second) at a server time :data:`SETTLED` past it is kept.
        """
        if not head.exact or modified is None or head.modified is None or head.served is None:
            return
        if modified.tzinfo is None or head.modified.tzinfo is None:
            return
        second = _second(modified)
        if unquote_etag(etag) != head.etag or second != _second(head.modified):
            return  # replaced between the listing and the HEAD: the HEAD vouches for another object
        if head.served < datetime.fromtimestamp(second, head.served.tzinfo) + SETTLED:
            return  # an object put at the key later could still have this second
        stamp = (object_key, head.etag, second)
        with self._lock:
            self._entries[stamp] = None
            self._entries.move_to_end(stamp)
            while len(self._entries) > self._bound:
                self._entries.popitem(last=False)
