"""One clean-up per file per erasure: the stores sharing a file leave it to the engine (docs/erasure.md).

A SQLite store's erase rebuilds its file (``VACUUM``) and empties its log
after deleting, so that no copy of an erased row is left in the file's
bytes. The built-in SQLite archive, session store, recall store and memory
store usually share one file: each rebuilt it, so one erasure rewrote the
whole file (holding its write lock, stalling every tenant's writers) up to
four times, and once more per batch.

A store that can leave its clean-up to the engine says so by having
``scrub_file_key`` (the identity of its file: every store on one file
gives the same) and ``scrub_erased(ctx)`` (that clean-up, returning
``(PhysicalErasure, detail)``), and by taking ``scrub=False`` on ``erase``.
The engine's erasure then erases from every store without a clean-up, and
once every store is done (verification and the snapshot's marking too),
runs one ``scrub_erased`` per distinct file. Its outcome is merged into the
record of every store on that file (the weakest counts), so a tombstone
says ``removed`` only once the file was rebuilt. A store without them (any
other backend, a wrapper) cleans up in its own ``erase``, as before.

The engine dedupes rather than the adapters marking the file as cleaned:
only the engine knows when the last store on a file has erased (a store
cleaning up before another deletes would leave the other's copies), and
the erasure port keeps its one ``erase`` method.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .._errors import ContractViolationError
from .._ports.erasure import ErasureRecord, PhysicalErasure
from .erasure_events import erasure_event
from .lifecycle import Ticket

__all__ = ["PHYSICAL_RANK", "defers_scrub", "scrub_files"]

_log = logging.getLogger("agentium.engine.erasure")
#: Where the physical outcomes rank: a record keeps the weakest any call reported.
PHYSICAL_RANK: Final = {
    PhysicalErasure.REMOVED: 0,
    PhysicalErasure.UNREFERENCED: 1,
    PhysicalErasure.VERSIONS_KEPT: 2,
}


def defers_scrub(store: object) -> bool:
    """True if ``store`` can leave its erase's clean-up to one :func:`scrub_files` call.

    Its ``erase`` must take ``scrub`` too: a host's subclass of a SQLite
    adapter that overrides ``erase`` without it cleans up in its own calls.
    """
    kind = type(store)
    return (
        callable(getattr(store, "scrub_erased", None))
        and hasattr(kind, "scrub_file_key")
        and _erase_takes_scrub(kind)
    )


def _erase_takes_scrub(kind: type) -> bool:
    # A few erase calls per erasure: read each time rather than cached per class.
    try:
        parameters = inspect.signature(getattr(kind, "erase")).parameters.values()  # noqa: B009
    except (AttributeError, TypeError, ValueError):
        return False
    # A ``**kwargs`` that drops it leaves the adapter's default (it cleans up itself): never unsafe.
    return any(p.name == "scrub" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _file_key(role: str, store: Any) -> str:
    try:
        key = store.scrub_file_key
    except Exception:
        key = None
    # A store that cannot name its file is cleaned up on its own (never merged with another).
    return key if isinstance(key, str) and key else f"store:{role}:{id(store)}"


async def scrub_files(
    ticket: Ticket, stores: Sequence[tuple[str, Any]], record: ErasureRecord
) -> ErasureRecord:
    """Clean up each distinct file of the deferring ``stores`` once; ``record`` with the outcomes.

    Every deferring store of the erasure is cleaned up, whether or not its
    last call removed anything: a resume after a stop between a deletion
    and this step finds nothing left to delete, and the file still needs it.
    A store the record has no entry for (the session store, cleaning up
    after a groups erasure rewrote the snapshot) gets a note when its file
    was not fully cleaned.
    """
    files: dict[str, list[tuple[str, Any]]] = {}
    for role, store in stores:
        if defers_scrub(store):
            files.setdefault(_file_key(role, store), []).append((role, store))
    for members in files.values():
        role, store = members[0]
        outcome = await ticket.call(f"{role} erasure clean-up", store.scrub_erased)
        if (
            not isinstance(outcome, tuple)
            or len(outcome) != 2
            or not isinstance(outcome[0], PhysicalErasure)
            or not isinstance(outcome[1], str)
        ):
            raise ContractViolationError(
                f"the {role} store's scrub_erased returned {type(outcome).__name__}, "
                "not (PhysicalErasure, str)"
            )
        physical, detail = outcome
        if physical is not PhysicalErasure.REMOVED:
            on_file = "/".join(r for r, _ in members)
            _log.warning(
                "erasure %s: the %s file was not fully cleaned up (%s)",
                record.erasure_id,
                on_file,
                physical.value,
            )
            kept = {"agentium.erasure.stores": on_file, "agentium.erasure.physical": physical.value}
            erasure_event("agentium.erasure.file_not_cleaned", kept)
        for member, _ in members:
            record = _merge(record, member, physical, detail)
    return record


def _merge(record: ErasureRecord, role: str, physical: PhysicalErasure, detail: str) -> ErasureRecord:
    entry = record.store(role)
    if entry is None:
        if physical is PhysicalErasure.REMOVED:
            return record
        note = f"the summary's former text: the {role.replace('_', ' ')} reports {physical.value}"
        return attrs.evolve(record, notes=(*record.notes, f"{note} ({detail})" if detail else note))
    weakest = max(entry.physical, physical, key=PHYSICAL_RANK.__getitem__)
    merged = attrs.evolve(entry, physical=weakest, detail=detail or entry.detail)
    return attrs.evolve(record, stores=tuple(merged if s.role == role else s for s in record.stores))
