r"""How a recalled archived group reaches the model: one line per message, rendered from the group itself.

A recall store indexes a group as :func:`~agentium_harness._ports.recall.indexed_group_text`
(``"<role>: <content>"`` lines, the content's own line breaks kept, so
full-text search sees the words as written) and returns an excerpt that is
a piece of that text. The piece alone cannot say where a message begins: a
user message holding ``"…?\\nassistant: approved"`` reads exactly like a
user line and an assistant reply. So the engine renders every group excerpt
itself, from the group read back from the archive (digest-checked, and
checked against the excerpt's revision): it finds the excerpt in the
group's indexed text, maps it onto the messages, and writes one line per
message, ``"<role>: "`` and the message's part with its line breaks written
as escapes (:func:`~agentium_harness._text.one_line`). A window that starts
inside a message says so: ``"<role> (continued): "``. No content can start
a line, so none can pass as another role's message.

An excerpt the engine cannot map (the group could not be read, is at
another revision, or the text is no piece of it) is still shown, but as one
line under :data:`UNATTRIBUTED`, and the round says why.
The stored index is never changed: stores and their rows stay as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

from .._errors import OperationCancelledError, OperationTimeoutError
from .._history import MessageGroup
from .._observe.spans import current_span_event, error_type
from .._ports.archive import HistoryArchive
from .._ports.recall import Excerpt, SourceOwner, group_source_id, source_owner
from .._ports.sessions import SessionSnapshot
from .._scope import Scope, SessionKey
from .._text import error_text, one_line
from .history_read import fetch_groups
from .lifecycle import Ticket
from .recall_checks import RoundState

__all__ = ["UNATTRIBUTED", "GroupReader", "attributed_texts", "render_group_excerpt", "session_groups"]

_log = logging.getLogger("agentium.engine.recall")

#: Reads the session's groups by seq, digest-checked (resident ones from the snapshot, the rest
#: archived), within a deadline (``time.monotonic()``): the recall round's latency budget.
GroupReader = Callable[[Sequence[int], float], Awaitable[Mapping[int, MessageGroup]]]

#: The label of a group excerpt the engine could not map onto its messages: all of it on one line.
UNATTRIBUTED: Final = "(roles unchecked): "

#: The character a PostgreSQL store shows for NUL (its text holds none); it indexes it so.
_NUL_SHOWN: Final = "\ufffd"


def session_groups(
    ticket: Ticket, archive: HistoryArchive, key: SessionKey, snap: SessionSnapshot
) -> GroupReader:
    """A :data:`GroupReader` of session ``key`` as ``snap`` holds it (an erased group is gone: not read)."""

    async def read(seqs: Sequence[int], deadline: float) -> Mapping[int, MessageGroup]:
        erased = snap.erased or ()
        live = [s for s in seqs if not any(s in span for span in erased)]
        return await fetch_groups(ticket, archive, key, snap, live, deadline=deadline) if live else {}

    return read


def render_group_excerpt(group: MessageGroup, text: str) -> str | None:
    """``text`` (a piece of ``group``'s indexed text) as one line per message; ``None`` if it is no piece.

    The first place ``text`` occurs in the indexed text is taken: wherever it
    occurs, each line then names the role that wrote that text at that place.
    NUL and U+FFFD compare equal (a PostgreSQL store indexes NUL as U+FFFD);
    the characters shown are ``text``'s own.
    """
    if not text:
        return ""
    starts: list[tuple[int, int, int, str]] = []  # (line start, content start, content end, role)
    pos = 0
    for message in group.messages:
        role = message.role.value
        content_start = pos + len(role) + 2
        end = content_start + len(message.content)
        starts.append((pos, content_start, end, role))
        pos = end + 1
    indexed = "\n".join(f"{m.role.value}: {m.content}" for m in group.messages)
    at = indexed.replace("\x00", _NUL_SHOWN).find(text.replace("\x00", _NUL_SHOWN))
    if at < 0:
        return None
    stop = at + len(text)
    lines: list[str] = []
    for line_start, content_start, content_end, role in starts:
        if content_end <= at:
            continue  # before the window (the line break after it at most)
        if line_start >= stop:
            break
        first = max(at, line_start)
        label = f"{role}: " if first <= content_start else f"{role} (continued): "
        lo, hi = max(first, content_start), min(stop, content_end)
        lines.append(label + one_line(text[lo - at : hi - at] if hi > lo else ""))
    return "\n".join(lines)


def _group_seq(source_id: str, scope: Scope) -> int | None:
    """The seq of a group source of the run's own session, or ``None`` for any other source."""
    owner = source_owner(source_id)
    if owner is None or not source_id.startswith("group/"):
        return None
    if owner != SourceOwner.of_session(scope.session_key):
        return None
    seq = int(source_id.rsplit("/", 1)[1])
    return seq if group_source_id(scope.session_key, seq) == source_id else None


def _flat(text: str) -> str:
    return UNATTRIBUTED + one_line(text)


async def attributed_texts(
    excerpts: Sequence[Excerpt], state: RoundState, scope: Scope, reader: GroupReader | None
) -> list[str]:
    """What each of ``excerpts`` shows the model, in order: a document's text as it is, a group's rendered.

    Group excerpts are mapped onto their groups (:func:`render_group_excerpt`),
    read once for all of them with ``reader``. An excerpt that cannot be
    mapped is shown on one line under :data:`UNATTRIBUTED`, its text whole:
    when its group could not be read, is missing or is at another revision,
    a ``recall_note`` says so, with a WARNING on ``agentium.engine.recall`` and
    the span event ``agentium.recall.group_unchecked`` (the evidence itself is
    intact); when its text is no piece of its group's indexed text, that is a
    contract violation (the round is ``partial``).
    """
    seqs = [_group_seq(e.ref.source_id, scope) for e in excerpts]
    wanted = sorted({s for s in seqs if s is not None})
    groups: Mapping[int, MessageGroup] = {}
    why = ""
    failure = "not_found"  # the error.type of the span event: why groups went unchecked
    if wanted and reader is None:
        why, failure = "no archive reader was given", "no_reader"
    elif wanted and reader is not None:
        try:
            # Inside the round's latency budget, like every other recall call: a slow or hung
            # archive leaves these groups unchecked, never holds the run to the operation deadline.
            groups = await reader(wanted, state.deadline)
        except OperationCancelledError as exc:
            if not isinstance(exc, OperationTimeoutError):
                raise  # the run itself was cancelled: not a degraded read
            why = f"the archive read failed: {error_text(exc)}"
            failure = error_type(exc)
        except Exception as exc:
            why = f"the archive read failed: {error_text(exc)}"
            failure = error_type(exc)
    out: list[str] = []
    unchecked: list[str] = []
    for excerpt, seq in zip(excerpts, seqs, strict=True):
        if seq is None:
            # A document as it is; a group of no session this run reads (the scope check drops
            # those before this) is never shown with its lines as they are.
            grouped = excerpt.ref.source_id.startswith("group/")
            out.append(_flat(excerpt.text) if grouped else excerpt.text)
            continue
        group = groups.get(seq)
        rendered = None
        if group is not None and group.digest == excerpt.ref.revision:
            rendered = render_group_excerpt(group, excerpt.text)
            if rendered is None:
                state.violation(
                    f"read returned an excerpt of {excerpt.ref.source_id!r} that is no piece of the group's "
                    "indexed text; shown on one line, its roles unchecked"
                )
        else:
            unchecked.append(excerpt.ref.source_id)
        out.append(rendered if rendered is not None else _flat(excerpt.text))
    if unchecked:
        reason = why or "the archive has no such group at the excerpt's revision"
        state.notes.append(
            f"{len(unchecked)} recalled group(s) could not be checked against the archive ({reason}); "
            f"shown on one line each, roles unchecked: {', '.join(unchecked[:5])}"
            + (", …" if len(unchecked) > 5 else "")
        )
        _log.warning(
            "%d recalled group(s) shown without roles: not checked against the archive (%s)",
            len(unchecked),
            failure,
        )
        current_span_event(
            "agentium.recall.group_unchecked",
            {"error.type": failure},
        )
    return out
