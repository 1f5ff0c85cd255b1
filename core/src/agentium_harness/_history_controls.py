"""What canonical history records about itself: control records, the view, interrupted turns.

A *control group* holds no messages but a :class:`HistoryControl` record: a
retraction or a view reset, appended to canonical history like any group
(never a deletion, never a message that looks like one). The session's
:class:`ViewState` (kept in its snapshot) says which committed messages the
view shows; see docs/history-api.md. A :class:`TurnInterruption` says why a
committed group has no final answer. Re-exported from ``_history``, where
the records that hold them live.
"""

from __future__ import annotations

import enum

import attrs

from ._tuples import tuple_of_refs, tuple_of_spans
from ._validators import non_negative_int

__all__ = [
    "ControlKind",
    "HistoryControl",
    "InterruptionCause",
    "MessageRef",
    "RetractedSpan",
    "TurnInterruption",
    "ViewState",
]


class InterruptionCause(enum.StrEnum):
    """What stopped a turn after its tools had run."""

    #: The provider failed (or answered out of contract) on a later step.
    PROVIDER_FAILED = "provider_failed"
    #: The recall policy stopped the turn at the commit fence.
    RECALL_STOPPED = "recall_stopped"
    #: Another writer committed the session first (compare-and-set conflict); what ran was
    #: committed on top of its revision, without the answer.
    COMMIT_CONFLICT = "commit_conflict"
    #: The host's publication hook refused the answer; what ran was committed without it.
    PUBLICATION_REFUSED = "publication_refused"
    #: The run was cancelled (``aclose()``, or the host cancelled ``run()``) after a tool started.
    CANCELLED = "cancelled"
    #: A later step failed with none of the causes above: an exception the engine did not type
    #: (a bug in the engine, or code it called unguarded), or the turn's own commit refused before
    #: its save landed (a snapshot over its size bound, a store failing during the commit's checks
    #: or its save). What ran was committed without the answer; ``detail`` names the error.
    #: A library older than this cause refuses a snapshot holding it (docs/runtime.md).
    STEP_FAILED = "step_failed"


@attrs.frozen(slots=True)
class TurnInterruption:
    """Why a committed group has no final answer: the turn stopped after its tools had run.

    Tools that ran changed the world, so their calls and results are
    committed, never dropped; the model's answer (if it gave one) is not.
    ``detail`` is the error, cut to a bound; for ``recall_stopped``, what the
    commit fence found, in the engine's words (as the uncertainty is: the
    recall policy's reason, which may quote the store, is the result's
    ``recall.reason``, never committed). An error that would quote a store
    (recall, memory, session or archive) is named by its class instead: a
    store's text may name another tenant's rows; the error raised keeps it.
    """

    cause: InterruptionCause = attrs.field(converter=InterruptionCause)
    detail: str = ""


class ControlKind(enum.StrEnum):
    """What a control group records."""

    #: ``HarnessRuntime.retract``: the last messages of the view leave it.
    RETRACT = "retract"
    #: ``HarnessRuntime.reset_view``: the view starts after this group; nothing before it is shown.
    RESET_VIEW = "reset_view"


@attrs.frozen(slots=True, order=True)
class MessageRef:
    """The position of one committed message: message ``index`` of group ``seq``."""

    seq: int = attrs.field(validator=non_negative_int)
    index: int = attrs.field(validator=non_negative_int)


@attrs.frozen(slots=True)
class HistoryControl:
    """A control record: the one thing a control group holds (it has no messages).

    ``reason`` is the host's, cut to 1,024 bytes. A retraction names the
    messages it took out of the view in ``retracted`` (oldest first); they
    stay committed, byte for byte, and ``read_history(view=False)`` returns
    them. A view reset names nothing: every group before it is out of the view.
    """

    kind: ControlKind = attrs.field(converter=ControlKind)
    reason: str = ""
    retracted: tuple[MessageRef, ...] = attrs.field(default=(), converter=tuple_of_refs)


@attrs.frozen(slots=True)
class RetractedSpan:
    """Messages out of the view, from message ``first_index`` of group ``first_seq`` on.

    The span reaches up to and including every message of group ``last_seq``
    (the control group of the retraction that made it).
    """

    first_seq: int = attrs.field(validator=non_negative_int)
    first_index: int = attrs.field(validator=non_negative_int)
    last_seq: int = attrs.field(validator=non_negative_int)

    def covers(self, seq: int) -> bool:
        """True when group ``seq`` has at least one message inside the span."""
        return self.first_seq <= seq <= self.last_seq


@attrs.frozen(slots=True)
class ViewState:
    """Which committed messages a session's view shows; kept in its snapshot, derived from its control groups.

    The view is every message of the groups from ``start`` on (the group
    after the latest view reset; 0 when there was none), except those in
    ``spans`` (ascending, disjoint). ``retracted`` counts the messages
    retractions took out of the current view. Nothing outside the view is
    deleted: it is canonical history, read back with ``read_history(view=False)``.
    A retraction that would add a span past ``MAX_RETRACTION_SPANS`` is
    refused (a state written with more still loads); a view reset starts
    with none.
    """

    start: int = attrs.field(default=0, validator=non_negative_int)
    spans: tuple[RetractedSpan, ...] = attrs.field(default=(), converter=tuple_of_spans)
    retracted: int = attrs.field(default=0, validator=non_negative_int)
