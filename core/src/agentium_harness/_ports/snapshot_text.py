"""The text of a snapshot's parts, for its canonical bytes: cached where a turn carries them over.

Archive marks, receipt digests, the summary and the view are written once per
object (a snapshot carries its predecessor's on), the memory scope once per
value; and the digest field's place in a snapshot's text, which the seal and
the digest of a sealed snapshot rewrite (:mod:`.snapshot`).
"""

from __future__ import annotations

import weakref
from typing import Any, Final, cast

from .._codec import canonical_json, unstructure
from .._scope import Scope, exact_scope_ids
from .archive_marks import ArchiveMark, listed_marks_text, mark_text

__all__ = [
    "ARCHIVED_HEAD",
    "EMPTY_RESIDENT",
    "PART_TEXTS",
    "cut_head",
    "digest_field",
    "marks_text",
    "part_text",
    "scope_text",
    "with_digest",
]

EMPTY_RESIDENT: Final = b'"resident":[]'
#: The one top-level key that sorts before ``boundary``: the archive marks, a list of
#: ``{"at": <time>, "below": <int>}`` objects (no ``]`` inside, so the list ends at the first one).
ARCHIVED_HEAD: Final = b'{"archived":['

# The text of a snapshot's parts that a turn carries over unchanged to the next snapshot (each
# archive mark, each receipt digest, the summary, the view), by object identity like the groups'
# encodings: a snapshot carries its predecessor's objects on and adds at most one mark and a few
# receipts, so a turn encodes those, not all of them. An entry leaves with its object, so an id is
# never reused while listed (the weak reference's callback removes it, as for snapshots). The
# records are frozen and hold no mutable JSON.
PART_TEXTS: dict[int, bytes] = {}
_PART_REFS: dict[int, weakref.ref[Any]] = {}


def _forget_part(key: int) -> None:
    PART_TEXTS.pop(key, None)
    _PART_REFS.pop(key, None)


def part_text(part: object) -> bytes:
    """The canonical JSON of a frozen part of a snapshot (a mark, a receipt, the summary, the view), once."""
    key = id(part)
    data = PART_TEXTS.get(key)
    if data is None:
        data = mark_text(part) if type(part) is ArchiveMark else canonical_json(unstructure(part))
        PART_TEXTS[key] = data
        _PART_REFS[key] = weakref.ref(part, lambda _, key=key: _forget_part(key))  # type: ignore[misc]
    return data


# The canonical text of a memory scope, by value (a run's scope is a new object each turn, equal to
# the last): keyed by its ids, not by the scope (whose hash and equality are Python methods), and
# only when they are all exact ``str`` or ``None`` (``exact_scope_ids``), whose text their values
# alone decide. Bounded, cleared when full.
_SCOPES: dict[tuple[str | None, ...], bytes] = {}
_MAX_SCOPES: Final = 4096


def scope_text(scope: Scope) -> bytes:
    """The canonical JSON of a memory scope, remembered by its ids when they are exact ``str``."""
    ids = exact_scope_ids(scope)
    if ids is None:
        return canonical_json(unstructure(scope))
    data = _SCOPES.get(ids)
    if data is None:
        data = canonical_json(unstructure(scope))
        if len(_SCOPES) >= _MAX_SCOPES:
            _SCOPES.clear()
        _SCOPES[ids] = data
    return data


def marks_text(marks: tuple[ArchiveMark, ...]) -> bytes:
    """The marks' text in a snapshot's encoding, without the brackets: joined from listed or cached parts."""
    listed = listed_marks_text(marks)
    if listed is not None:
        return listed
    # Most marks were carried over from the last snapshot: their text is cached.
    found = list(map(PART_TEXTS.get, map(id, marks)))
    while None in found:  # a new mark (one a turn, the last): found at C speed, not by a loop
        at = found.index(None)
        found[at] = part_text(marks[at])
    return b",".join(cast("list[bytes]", found))


def digest_field(boundary: int, digest: str | None) -> bytes:
    """The ``boundary`` and ``digest`` keys of a snapshot's encoding, adjacent in sorted order."""
    value = b"null" if digest is None else b'"' + digest.encode("ascii") + b'"'
    return b'"boundary":%d,"digest":%s,' % (boundary, value)


def _digest_field_at(data: bytes) -> int | None:
    """Where the ``boundary`` and ``digest`` keys start in a snapshot's text; ``None`` if unsure.

    The top-level keys are sorted: ``boundary`` and ``digest`` come first, or
    right after the ``archived`` marks, whose text holds times and numbers
    only (so their list ends at the first ``]``).
    """
    if data.startswith(ARCHIVED_HEAD):
        at = data.find(b"]", len(ARCHIVED_HEAD)) + 2  # past "]," closing the marks
        return at if at >= 2 and data[at - 1 : at] == b"," else None
    return 1 if data.startswith(b"{") else None


def with_digest(data: bytes, boundary: int, old: str | None, new: str | None) -> bytes | None:
    """``data``, a snapshot's encoding with digest ``old``, as it is with digest ``new``; ``None`` if unsure.

    The digest field sits at a known place (:func:`_digest_field_at`), and a
    digest is ``sha256:`` and hex digits (nothing JSON escapes), so nothing
    else differs. Should another field ever sort before them, this says
    ``None`` and the caller encodes.
    """
    if old is not None and not old.isascii():
        return None
    at = _digest_field_at(data)
    head = digest_field(boundary, old)
    if at is None or not data.startswith(head, at):
        return None
    return data[:at] + digest_field(boundary, new) + data[at + len(head) :]


def cut_head(head: bytes, boundary: int) -> tuple[bytes, bytes, bytes] | None:
    """``head`` (digest ``null``) cut where the digest's value and the groups go; ``None`` if unsure.

    The three parts the seal writes: to ``"digest":``, from the comma after
    ``null`` to ``"resident":[``, and from the ``]`` closing the groups on.
    """
    field = digest_field(boundary, None)
    at = _digest_field_at(head)
    if at is None or not head.startswith(field, at):
        return None
    cut = at + len(field) - len(b"null,")
    # Keys are sorted and no other key at any depth is named "resident": the marker occurs once.
    place = head.find(EMPTY_RESIDENT, cut) + len(EMPTY_RESIDENT) - 1
    if place < len(EMPTY_RESIDENT) - 1:  # pragma: no cover - every header holds the marker
        return None
    return head[:cut], head[cut + len(b"null") : place], head[place:]
