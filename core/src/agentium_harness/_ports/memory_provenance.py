"""What a duplicate ``remember`` does with the groups it cites: every memory store's one rule.

A ``remember`` whose text and validity match a current fact of the same
scope is a duplicate, and so is a ``correct`` whose replacement matches the
fact's current revision. Its provenance still says where the fact came from
this time: dropped, erasing the session only it named would leave a fact
that session also produced (docs/erasure.md). So a store keeps it: when the
duplicate cites groups the current revision does not, the store writes the
next revision of that fact, same content, its provenance the current one's
followed by the new groups (:func:`merged_provenance`), and acknowledges it
``STORED`` with that revision; when it cites nothing new it writes nothing
and acknowledges ``DUPLICATE`` as before. A merge is a revision like a
correction: it counts against :data:`~.memory.MAX_FACT_REVISIONS`
(:func:`~.memory.check_revision`), and the merged provenance must stay within
:data:`~.memory.MAX_PROVENANCE`; past either the remember is refused with
:class:`~agentium_harness.MemoryRejectedError` and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors_memory import MemoryRejectedError
from .memory import MAX_PROVENANCE, GroupRef

__all__ = ["merged_provenance"]


def merged_provenance(current: Sequence[GroupRef], added: Sequence[GroupRef]) -> tuple[GroupRef, ...] | None:
    """The provenance a duplicate citing ``added`` leaves on a fact whose current revision cites ``current``.

    ``None`` when ``added`` cites no group ``current`` does not (a plain
    duplicate: write nothing). Otherwise ``current``'s references, then each
    new one of ``added`` once, in order: write it as the fact's next revision.

    Raises :class:`MemoryRejectedError` when that would cite more than
    :data:`MAX_PROVENANCE` groups (nothing may be written then).
    """
    merged = list(dict.fromkeys(current))
    known = set(merged)
    new = [ref for ref in dict.fromkeys(added) if ref not in known]
    if not new:
        return None
    merged.extend(new)
    if len(merged) > MAX_PROVENANCE:
        raise MemoryRejectedError(
            f"the fact is already remembered citing {len(known)} groups; with the {len(new)} this remember "
            f"adds it would cite {len(merged)}, over the limit of {MAX_PROVENANCE}"
        )
    return tuple(merged)
