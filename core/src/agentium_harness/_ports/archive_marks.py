"""Archive marks: when a session's groups were archived, at most 32 of them, kept by each commit.

A commit that moves a session's boundary adds a mark (:func:`add_archive_mark`);
retention by age reads them. Their text in a snapshot's encoding is kept with
the marks tuples commits make, so a turn adds one mark without walking all of
them again (:func:`listed_marks_text`).
"""

from __future__ import annotations

import itertools
import operator
from datetime import UTC, datetime, timedelta
from typing import Final

import attrs

from .._codec import canonical_json, iso_utc, unstructure

__all__ = ["MAX_ARCHIVE_MARKS", "ArchiveMark", "add_archive_mark", "listed_marks_text", "mark_text"]


#: Most archive marks a snapshot keeps (:attr:`SessionSnapshot.archived`).
MAX_ARCHIVE_MARKS: Final = 32


@attrs.frozen(slots=True)
class ArchiveMark:
    """Every group of the session below ``below`` was archived at ``at`` or earlier (retention by age)."""

    below: int
    at: datetime


def add_archive_mark(
    marks: tuple[ArchiveMark, ...] | None, below: int, at: datetime
) -> tuple[ArchiveMark, ...]:
    """``marks`` and one for a boundary moved to ``below`` at ``at``; at most :data:`MAX_ARCHIVE_MARKS`.

    When there are too many, the mark closest in time to the next one is
    dropped: the groups it covered take the next mark's (later) time, so a
    group may look younger than it is, never older — retention by age keeps
    it a little longer rather than erasing it early.
    """
    listed = _MARK_LISTS.get(id(marks)) if marks else None
    if (
        listed is not None
        and listed[0] is marks
        and type(below) is int
        and type(at) is datetime
        and at.tzinfo is UTC
        and marks
        and marks[-1].below < below
    ):
        return _added_mark(marks, below, at)
    kept = [m for m in (marks or ()) if m.below < below]
    kept.append(ArchiveMark(below, at))
    while len(kept) > MAX_ARCHIVE_MARKS:
        times = [m.at for m in kept]
        gaps = list(map(operator.sub, times[1:], times[:-1]))
        del kept[gaps.index(min(gaps))]  # the first of equal gaps, as ``min`` over ``(gap, index)``
    added = tuple(kept)
    _list_marks(added)
    return added


# A turn that moves the boundary adds one mark to the marks it carried over (and past 32 drops the
# one closest in time to the next): kept with each marks tuple a commit made, by identity, are its
# marks' joined text, each mark's text length and the gaps between their times in microseconds, so
# the next turn's mark costs a copy of those and one subtraction, and the snapshot's header takes
# the text as it is, instead of walking all 32 marks. Only for marks of exact types, ``below``
# ascending and every time in UTC (``datetime.now(UTC)``): times with one tzinfo subtract field by
# field, so the gap across a dropped mark is the sum of the two gaps it joins, exactly. A tuple
# cannot be weakly referenced: an entry holds its tuple (so its id is never reused while listed); a
# tuple's entry leaves when a mark is added to it (a retried commit adds to the same marks again,
# the plain way), and the table is cleared when full. ``(marks, joined text, lengths, gaps)``.
_MARK_LISTS: dict[int, tuple[tuple[ArchiveMark, ...], bytes, list[int], list[int]]] = {}
_MAX_MARK_LISTS: Final = 1024
_AT: Final = operator.attrgetter("at")
_BELOW: Final = operator.attrgetter("below")
_TZINFO: Final = operator.attrgetter("tzinfo")
_MICROSECOND: Final = timedelta(microseconds=1)
# A mark's canonical JSON, filled with its time's UTC text and ``below`` (one place for both writers).
_MARK_TEXT: Final = b'{"at":"%s","below":%d}'


def _list_marks(marks: tuple[ArchiveMark, ...]) -> None:
    """List ``marks`` (made by :func:`add_archive_mark`) when they are all the fast path takes."""
    times = list(map(_AT, marks))
    belows = list(map(_BELOW, marks))
    # Each ``all`` at C speed (``operator.is_`` over maps): three generators were a tenth of the
    # calls of a turn that loads its marks afresh.
    if (
        all(map(operator.is_, map(type, marks), itertools.repeat(ArchiveMark)))
        and all(map(operator.is_, map(type, belows), itertools.repeat(int)))
        and all(map(operator.is_, map(type, times), itertools.repeat(datetime)))
        and all(map(operator.is_, map(_TZINFO, times), itertools.repeat(UTC)))
        and belows == sorted(belows)
        and len(marks) <= MAX_ARCHIVE_MARKS
    ):
        texts = [mark_text(m) for m in marks]
        gaps = [(b - a) // _MICROSECOND for a, b in itertools.pairwise(times)]
        _remember_marks(marks, b",".join(texts), list(map(len, texts)), gaps)


def _remember_marks(
    marks: tuple[ArchiveMark, ...], joined: bytes, lengths: list[int], gaps: list[int]
) -> None:
    if len(_MARK_LISTS) >= _MAX_MARK_LISTS:
        _MARK_LISTS.clear()
    _MARK_LISTS[id(marks)] = (marks, joined, lengths, gaps)


def _added_mark(marks: tuple[ArchiveMark, ...], below: int, at: datetime) -> tuple[ArchiveMark, ...]:
    """:func:`add_archive_mark` for listed marks, ascending, all below ``below``, and a time in UTC."""
    _, joined, lengths, gaps = _MARK_LISTS.pop(id(marks))
    text = _MARK_TEXT % (_utc_text(at), below)
    kept = [*marks, ArchiveMark(below, at)]
    joined += b"," + text
    lengths = [*lengths, len(text)]
    gaps = [*gaps, (at - marks[-1].at) // _MICROSECOND]
    if len(kept) > MAX_ARCHIVE_MARKS:
        # Listed marks are at most 32: one goes, the first of equal gaps as in the loop above (a
        # gap is never the last mark's: its text has a comma after it).
        drop = gaps.index(min(gaps))
        start = sum(lengths[:drop]) + drop
        joined = joined[:start] + joined[start + lengths[drop] + 1 :]
        del kept[drop], lengths[drop]
        if drop:
            gaps[drop - 1] += gaps[drop]
        del gaps[drop]
    added = tuple(kept)
    _remember_marks(added, joined, lengths, gaps)
    return added


def listed_marks_text(marks: tuple[ArchiveMark, ...]) -> bytes | None:
    """The marks' text in a snapshot's encoding (without brackets) when :func:`add_archive_mark` made them."""
    listed = _MARK_LISTS.get(id(marks))
    return listed[1] if listed is not None and listed[0] is marks else None


def mark_text(mark: ArchiveMark) -> bytes:
    """A mark's canonical JSON, as the converter and ``canonical_json`` write it."""
    if (
        type(mark) is ArchiveMark
        and type(mark.below) is int
        and isinstance(mark.at, datetime)
        and mark.at.utcoffset() is not None
    ):
        # What the converter writes for a mark (an aware time as fixed-width UTC text, which
        # JSON never escapes), without building the dict and encoding it.
        return _MARK_TEXT % (_utc_text(mark.at), mark.below)
    return canonical_json(unstructure(mark))


def _utc_text(at: datetime) -> bytes:
    """:func:`~agentium_harness._codec.iso_utc` of an aware ``at``, as ASCII bytes.

    A time already in UTC (every mark a commit adds: ``datetime.now(UTC)``) is
    formatted field by field, as ``isoformat`` does (the year padded to four
    digits), without converting it and copying it twice first.
    """
    if type(at) is datetime and at.tzinfo is UTC:
        return b"%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (
            at.year,
            at.month,
            at.day,
            at.hour,
            at.minute,
            at.second,
            at.microsecond,
        )
    return iso_utc(at).encode("ascii")
