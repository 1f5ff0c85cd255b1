"""The summarizer port: incremental task summaries with citations (R5, R23, R26)."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final

import attrs

from .._errors import InvalidArgumentError
from .._history import MessageGroup
from .._tuples import tuple_of_citations, tuple_of_gaps
from .._validators import MAX_COUNT, bounded_count, bounded_duration, unicode_text
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = [
    "Citation",
    "CoverageGap",
    "GapReason",
    "Summarizer",
    "SummarizerCapabilities",
    "SummaryLimits",
    "SummaryState",
    "TaskSummary",
]


#: Longest ``policy`` or ``version`` of a summary, in characters (see :func:`is_policy_token`).
MAX_POLICY_CHARS: Final = 64
#: What a ``policy`` or ``version`` may be: a name, not prose. Both are copied into the retained
#: record of every committed group after the summary, records an erasure never rewrites (their
#: digests are committed), so they must not be able to state a fact from the summarized text.
#: No ``@``: the request shows them as ``policy@version``.
_POLICY_TOKEN: Final = re.compile(rf"[A-Za-z0-9._:/+-]{{1,{MAX_POLICY_CHARS}}}")
#: Most ``uncertainty`` notes a summary carries; the model request shows every one.
MAX_UNCERTAINTY_NOTES: Final = 16
#: Most UTF-8 bytes of a summary's ``uncertainty`` notes together.
MAX_UNCERTAINTY_BYTES: Final = 4_096
#: Longest citation digest, in characters (a ``sha256:`` digest has 71).
MAX_DIGEST_CHARS: Final = 256
#: Most citations a summary keeps: every model request shows each one and every save rewrites them,
#: so the engine keeps the newest (highest seqs) of a longer list, whatever the summarizer answers.
MAX_SUMMARY_CITATIONS: Final = 512


def check_text(value: object, name: str) -> str:
    """``value`` if it is exactly a ``str`` that encodes as UTF-8 (no lone surrogate).

    A ``str`` subclass is refused too: what is stored is what the codec
    writes, and a subclass may say otherwise. The message names the type or
    position only, never the value (it may be large or private).
    Raises :class:`InvalidArgumentError` naming ``name``.
    """
    if type(value) is not str:
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
    return unicode_text(value, name, "; it cannot be stored")


def is_policy_token(value: str) -> bool:
    """Whether ``value`` may be a summary's ``policy`` or ``version``.

    1 to :data:`MAX_POLICY_CHARS` ASCII letters, digits and ``. _ : / + -``
    (``extractive``, ``model``, ``2024-05-01``, ``gpt-4o-mini:v3``).
    """
    return _POLICY_TOKEN.fullmatch(value) is not None


def check_seq(value: object, name: str) -> int:
    """``value`` if it is exactly an ``int`` in ``0..MAX_COUNT`` (``bool`` and ``float`` refused)."""
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        shown = type(value).__name__ if type(value) is not int else "an integer out of range"
        raise InvalidArgumentError(f"{name} must be an integer from 0 to {MAX_COUNT}, got {shown}")
    return value


def check_notes(value: object, name: str) -> tuple[str, ...]:
    """``value`` as a tuple if it is a tuple or list of strings each passing :func:`check_text`."""
    if not isinstance(value, tuple | list):
        raise InvalidArgumentError(f"{name} must be a tuple of str, got {type(value).__name__}")
    return tuple(check_text(note, f"{name}[{i}]") for i, note in enumerate(value))


def _note_bytes(note: str) -> int:
    return len(note.encode("utf-8", "surrogatepass"))


def fit_notes(notes: Sequence[str]) -> tuple[str, ...]:
    """``notes`` within :data:`MAX_UNCERTAINTY_NOTES` and :data:`MAX_UNCERTAINTY_BYTES`.

    The newest notes that fit are kept, whole and in order; when any is
    dropped, the first note says how many, so the summary never claims more
    certainty than it has. Each note is a ``str`` (checked by the caller).
    """
    total = sum(_note_bytes(n) for n in notes)
    if len(notes) <= MAX_UNCERTAINTY_NOTES and total <= MAX_UNCERTAINTY_BYTES:
        return tuple(notes)
    # Room is kept for the marker note (its count has at most 13 digits).
    budget = MAX_UNCERTAINTY_BYTES - _note_bytes(_dropped_notes(MAX_COUNT))
    kept: list[str] = []
    for note in reversed(notes):
        size = _note_bytes(note)
        if len(kept) < MAX_UNCERTAINTY_NOTES - 1 and size <= budget:
            kept.append(note)
            budget -= size
    kept.reverse()
    dropped = len(notes) - len(kept)
    earlier = _DROPPED.fullmatch(notes[0])
    if earlier is not None and notes[0] not in kept:
        # The marker of an earlier cut is folded into this one: one marker, the total count.
        dropped += int(earlier.group(1)) - 1
    return (_dropped_notes(dropped), *kept)


#: Most uncertainty notes of an answer the engine reads: the newest; the older ones are counted unread.
MAX_READ_NOTES: Final = 8 * MAX_UNCERTAINTY_NOTES


def newest_notes(value: object) -> object:
    """The last :data:`MAX_READ_NOTES` of a tuple or list of notes, the rest counted in one marker note.

    The check of an answer runs on the event loop: a list of millions of notes
    must cost it no more than this many. The list's real length and items are
    taken (``tuple.__len__``, ``list.__getitem__``), not what a subclass says.
    The marker is the one :func:`fit_notes` writes (folding in an earlier
    marker's count when it is the first note dropped), so the summary still
    says how many were dropped. Anything else is returned as it is, for
    :func:`check_notes` to refuse.
    """
    if not isinstance(value, tuple | list):
        return value
    take: Any = tuple.__getitem__ if isinstance(value, tuple) else list.__getitem__
    size = tuple.__len__(value) if isinstance(value, tuple) else list.__len__(value)
    if size <= MAX_READ_NOTES:
        return take(value, slice(None))
    dropped = size - MAX_READ_NOTES
    head = take(value, 0)
    earlier = _DROPPED.fullmatch(head) if type(head) is str else None
    if earlier is not None:
        dropped += int(earlier.group(1)) - 1  # the earlier marker stands for its count, not itself
    return (_dropped_notes(dropped), *take(value, slice(size - MAX_READ_NOTES, None)))


def _dropped_notes(count: int) -> str:
    return f"{count} older uncertainty note(s) were dropped to keep the summary bounded"


_DROPPED = re.compile(r"(\d{1,13}) older uncertainty note\(s\) were dropped to keep the summary bounded")


def _text_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_text(value, f"{type(instance).__name__}.{attribute.name}")


def _seq_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_seq(value, f"{type(instance).__name__}.{attribute.name}")


def _optional_seq_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_seq(value, f"{type(instance).__name__}.{attribute.name}")


def _notes_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_notes(value, f"{type(instance).__name__}.{attribute.name}")


def _digest_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_text(value, f"{type(instance).__name__}.{attribute.name}")
    if not value or len(str(value)) > MAX_DIGEST_CHARS:
        raise InvalidArgumentError(
            f"{type(instance).__name__}.{attribute.name} must be 1 to {MAX_DIGEST_CHARS} characters"
        )


def _citations_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    for item in value:  # type: ignore[attr-defined]
        if not isinstance(item, Citation):
            raise InvalidArgumentError(
                f"{type(instance).__name__}.{attribute.name} must hold Citation items, "
                f"got {type(item).__name__}"
            )


def _detail_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # Type only: the engine writes an adapter's error text here, and the codec checks its encoding.
    if not isinstance(value, str):
        raise InvalidArgumentError(f"CoverageGap.{attribute.name} must be a str, got {type(value).__name__}")


def _summary_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, TaskSummary):
        raise InvalidArgumentError(f"SummaryState.summary must be a TaskSummary, got {type(value).__name__}")


def _gaps_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    for item in value:  # type: ignore[attr-defined]
        if not isinstance(item, CoverageGap):
            raise InvalidArgumentError(
                f"SummaryState.gaps must hold CoverageGap items, got {type(item).__name__}"
            )


def _reason_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, GapReason):
        raise InvalidArgumentError(
            f"CoverageGap.{attribute.name} must be a GapReason, got {type(value).__name__}"
        )


def _flag_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{type(instance).__name__}.{attribute.name} must be True or False")


def _notes_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Typed tuple converter of ``uncertainty``: a lone string or a non-iterable is a typed error."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"uncertainty must be a sequence of str, got {type(value).__name__}")
    return tuple(value)


def _citation_tuple(value: Iterable[Citation]) -> tuple[Citation, ...]:
    """Typed tuple converter of ``citations``: a non-iterable is a typed error."""
    if not isinstance(value, Iterable):
        raise InvalidArgumentError(f"citations must be a sequence of Citation, got {type(value).__name__}")
    return tuple_of_citations(value)


def _gap_tuple(value: Iterable[CoverageGap]) -> tuple[CoverageGap, ...]:
    """Typed tuple converter of ``gaps``: a non-iterable is a typed error."""
    if not isinstance(value, Iterable):
        raise InvalidArgumentError(f"gaps must be a sequence of CoverageGap, got {type(value).__name__}")
    return tuple_of_gaps(value)


@attrs.frozen(slots=True)
class SummarizerCapabilities(Capabilities):
    """What a summarizer declares.

    - ``incremental``: folds new groups into a previous summary (required).
    - ``citations``: every statement cites the groups it came from.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("incremental",)

    incremental: bool = False
    citations: bool = False


@attrs.frozen(slots=True)
class Citation:
    """Identifies evidence (a group ``seq`` and its digest); it never restores omitted raw text (R5)."""

    seq: int = attrs.field(validator=_seq_field)
    digest: str = attrs.field(validator=_digest_field)


@attrs.frozen(slots=True)
class TaskSummary:
    """A summary of canonical groups below ``frontier`` (exclusive), with citations and uncertainty."""

    text: str = attrs.field(validator=_text_field)
    frontier: int = attrs.field(validator=_seq_field)
    citations: tuple[Citation, ...] = attrs.field(
        default=(), converter=_citation_tuple, validator=_citations_field
    )
    policy: str = attrs.field(default="default", validator=_text_field)
    version: str = attrs.field(default="1", validator=_text_field)
    uncertainty: tuple[str, ...] = attrs.field(default=(), converter=_notes_tuple, validator=_notes_field)


class GapReason(enum.StrEnum):
    """Why the summary frontier stopped at a group (R23)."""

    #: The archive (or recall store) could not be read, or did not return the group.
    UNAVAILABLE = "unavailable"
    #: The group's bytes no longer match the digest the archive acknowledged.
    CHANGED = "changed"
    #: A group came back out of order, incomplete (missing tool results) or not at all.
    INCOMPLETE = "incomplete"
    #: The group belongs to another session's scope (or carries no retained record and no receipt
    #: vouches for it); it was never offered to the summarizer.
    FOREIGN = "foreign"
    #: The group alone is larger than the update's input byte budget.
    TOO_LARGE = "too_large"


@attrs.frozen(slots=True)
class CoverageGap:
    """A group the frontier could not pass, and why. The next update retries it."""

    seq: int = attrs.field(validator=_seq_field)
    reason: GapReason = attrs.field(validator=_reason_field)
    detail: str = attrs.field(default="", validator=_detail_field)


def _optional_seqs(value: Iterable[int] | None) -> tuple[int, ...] | None:
    """Sorted distinct seqs, or ``None`` for none (so an untouched state keeps its bytes)."""
    if value is None:
        return None
    seqs = tuple(sorted(set(value)))
    return seqs or None


@attrs.frozen(slots=True)
class SummaryState:
    """A session's task summary as stored in its snapshot: the summary and its coverage gaps.

    Every canonical group below ``summary.frontier`` is covered; ``gaps``
    names the group the frontier stopped at, when an update could not pass
    it. The state is saved inside the session snapshot, so it shares the
    snapshot's compare-and-set and digest: two runtimes never both advance
    it, and a crash mid-update leaves the previous state intact.
    ``erased_citations`` lists the cited groups an erasure has removed
    since (retention): the summary keeps its text, and its citations of
    those groups say they were erased.

    ``given_until`` is one past the newest group a summarizer was given
    while writing the text (carried on while the text is): a summarizer may
    answer a frontier below the groups it was given (it folded fewer), yet
    its text may state them, so the text may state every group below
    ``max(frontier, given_until)``. ``None``: saved
    before the field existed, or never written by a summarizer; such a text
    may state any archived group of the session.
    """

    #: Left out of the encoding when ``None``: states saved before these fields existed keep their bytes.
    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("erased_citations", "given_until")

    summary: TaskSummary = attrs.field(validator=_summary_field)
    gaps: tuple[CoverageGap, ...] = attrs.field(default=(), converter=_gap_tuple, validator=_gaps_field)
    #: Cited groups an erasure removed since (retention): the text stays, the citation says ``erased``.
    erased_citations: tuple[int, ...] | None = attrs.field(default=None, converter=_optional_seqs)
    #: One past the newest group a summarizer was given for the text (``None``: unknown, any archived one).
    given_until: int | None = attrs.field(default=None, validator=_optional_seq_field)

    def coverage(self) -> str:
        """Coverage as the model and operators read it, e.g. ``groups 0–41 summarized; 42 unavailable``."""
        frontier = self.summary.frontier
        head = f"groups 0\u2013{frontier - 1} summarized" if frontier > 0 else "no groups summarized"
        tail = "".join(f"; {g.seq} {g.reason.value}" for g in self.gaps)
        return head + tail


def text_reach(state: SummaryState, boundary: int) -> int:
    """One past the newest group ``state``'s text and notes may state; ``boundary``: the session's.

    ``max(frontier, given_until)``; a state without ``given_until`` (saved
    before it existed) may state any archived group, so ``boundary``: a
    summarizer is only ever given archived groups.
    """
    given = state.given_until
    return max(state.summary.frontier, boundary if given is None else given)


@attrs.frozen(slots=True)
class SummaryLimits:
    """The budget of one summary update; the engine enforces each field.

    - ``max_groups``: groups read and folded per update (the rest wait for the next one);
    - ``max_input_bytes``: canonical bytes of the groups offered to the summarizer;
    - ``max_summary_bytes``: UTF-8 bytes of the summary text; a longer one is refused whole;
    - ``timeout_s``: the deadline of the group read, and of the summarizer call when neither
      ``model_timeout_s`` here nor the runtime's is set;
    - ``background``: run the update after the turn has returned (the default), as owned
      work of the runtime that the next run on the session, ``close_session`` and
      ``aclose`` wait for or cancel; ``False`` runs it inline, before the run returns;
    - ``model_timeout_s``: the deadline of the summarizer call (a summarizer may call a
      model); ``None`` (the default) means the runtime's ``model_timeout_s`` when it sets
      one, else ``timeout_s``. Shutdown stays bounded by the settle and close limits.

    Every count is an integer from 1 to its ceiling and every duration a finite number of
    seconds above 0 and at most 3600, else :class:`InvalidArgumentError`.
    """

    max_groups: int = attrs.field(default=32, validator=bounded_count())
    max_input_bytes: int = attrs.field(default=262_144, validator=bounded_count())
    max_summary_bytes: int = attrs.field(default=4_096, validator=bounded_count())
    timeout_s: float = attrs.field(default=10.0, validator=bounded_duration())
    background: bool = attrs.field(default=True, validator=_flag_field)
    # Last, so positional construction keeps its meaning.
    model_timeout_s: float | None = attrs.field(default=None, validator=bounded_duration(optional=True))


class Summarizer:
    """Port for a summarizer."""

    capabilities: ClassVar[SummarizerCapabilities]

    @port_stub
    async def summarize(
        self, previous: TaskSummary | None, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> TaskSummary:
        """Fold complete ``groups`` (contiguous from ``previous.frontier``) into a new summary.

        Call ``ctx.raise_if_expired("summarize")`` before starting and between
        groups; the result must cite only groups it was given.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "summarize")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself."""
