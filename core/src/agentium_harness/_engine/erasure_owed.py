"""What a call still owes once a step of its erasure failed and another call completed that erasure.

Another call (a concurrent ``agentium erase --resume``) may complete an
erasure after this call's store calls removed rows and before its file
clean-up: rows it removed after the other call's clean-up (a late write
the other never saw) are counted ``removed`` by that tombstone, so this
call still cleans up the files of the stores it removed from
(:func:`clean_up_own`), wherever it goes on from that tombstone
(:mod:`.erasure_run`), and says so (:func:`warn_overtaken`).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from .._observe.spans import error_type
from .._ports.erasure import ErasureRecord
from .erasure_events import erasure_event
from .erasure_scrub import scrub_files
from .lifecycle import Ticket

__all__ = ["Owed", "clean_up_own", "warn_overtaken"]

_log = logging.getLogger("agentium.engine.erasure")


@attrs.define
class Owed:
    """What a call owes if a step past its store calls failed and the erasure read pending there.

    :func:`.erasure_run._carry` sets it before raising; another call's tombstone may land
    before the read back in :func:`.erasure_run._stopped_or_again`, which then runs the clean-up
    of the call's own files (a step before that clean-up failed) and says what it left
    (:func:`warn_overtaken`; after the clean-up itself failed, that the files may keep copies).
    """

    step: str = ""  # the step past the store calls that failed ("": none)
    stores: list[tuple[str, Any]] = attrs.Factory(list)  # the stores this call removed from
    marks: bool = False  # a groups erasure's marking: the snapshot's former text may stay


async def clean_up_own(ticket: Ticket, mine: list[tuple[str, Any]], record: ErasureRecord) -> bool:
    """Clean up the files of ``mine`` (the stores this call removed from); whether that succeeded."""
    try:
        await scrub_files(ticket, mine, record)
    except Exception:
        return False  # the warning says the files may keep copies
    return True


def warn_overtaken(done: ErasureRecord, step: str, exc: Exception, cleaned_up: bool, marks: bool) -> None:
    """The WARNING and span event of ``step`` failing once another call completed ``done``'s erasure.

    Its tombstone stands and says nothing of this: rows this call removed (and
    a summary its marking emptied) may keep copies in their files until those
    files' next clean-up.
    """
    left = (
        "it cleaned up the files of the stores it removed from"
        if cleaned_up
        else "the files of the stores it removed from may keep copies of what it removed until "
        "their next clean-up"
    )
    if marks and not (cleaned_up and step == "check"):
        left += "; the session store's may keep the former text of a summary its marking emptied"
    _log.warning(
        "erasure %s was completed by another call; this call's %s %s failed (%s): %s",
        done.erasure_id,
        step,
        "before its file clean-up" if step == "check" else "after it",
        error_type(exc),
        left,
    )
    overtaken = {
        "error.type": error_type(exc),
        "agentium.erasure.step": step.replace(" ", "_").replace("-", "_"),
    }
    erasure_event("agentium.erasure.overtaken", {**overtaken, "agentium.erasure.cleaned_up": cleaned_up})
