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

An excerpt the engine cannot map (the group could not be read, was left
unread past the read-back's byte budget, is at another revision, or the
text is no piece of it) is still shown, but as one line under
:data:`UNATTRIBUTED`, and the round says why; unless the session was
erased whole before this one used its id: then an excerpt the archive does
not vouch for may be the erased session's, and it is hidden.
The stored index is never changed: stores and their rows stay as they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Final

from .._errors import OperationCancelledError, OperationTimeoutError
from .._history import MessageGroup
from .._observe.spans import current_span_event, error_type
from .._ports.recall import Excerpt, SourceOwner, group_source_id, source_owner
from .._scope import Scope
from .._text import error_text, one_line
from .recall_checks import Failed, RoundState
from .recall_readback import GroupReader, ReadBack

__all__ = ["UNATTRIBUTED", "attributed_texts", "render_group_excerpt"]

_log = logging.getLogger("agentium.engine.recall")

#: The label of a group excerpt the engine could not map onto its messages: all of it on one line.
UNATTRIBUTED: Final = "(roles unchecked): "

#: The character a PostgreSQL store shows for NUL (its text holds none); it indexes it so.
_NUL_SHOWN: Final = "\ufffd"


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
) -> list[str | None]:
    """What each of ``excerpts`` shows the model, in order: a document's text as it is, a group's rendered.

    Group excerpts are mapped onto their groups (:func:`render_group_excerpt`),
    read once each with ``reader``, in rank order, within what is left of
    the run's ``max_readback_bytes`` (advancing ``state.readback_bytes``).
    An excerpt that cannot be mapped is shown on one line under
    :data:`UNATTRIBUTED`, its text whole: when its group could not be read,
    was left unread past the byte budget, is missing or is at another
    revision, a ``recall_note`` says so, with a WARNING on
    ``agentium.engine.recall`` and the span event
    ``agentium.recall.group_unchecked`` (the evidence itself is intact);
    when its text is no piece of its group's indexed text, that is a
    contract violation (the round is ``partial``). ``None`` in place of a
    text: the excerpt is hidden, because the session was erased whole
    before (its id used again) and nothing vouches that the excerpt is not
    the erased session's (see :func:`_hidden_as_erased`): any of the
    unmapped ones above, and one whose text is no piece of its group.
    """
    seqs = [_group_seq(e.ref.source_id, scope) for e in excerpts]
    wanted = list(dict.fromkeys(s for s in seqs if s is not None))  # rank order, each once
    back = ReadBack()
    why = ""
    failure = "not_found"  # the error.type of the span event: why groups went unchecked
    if wanted and reader is None:
        why, failure = "no archive reader was given", "no_reader"
    elif wanted and reader is not None:
        # Inside the round's latency budget, like every other recall call: a slow or hung archive
        # leaves these groups unchecked, never holds the run to the operation deadline. And inside
        # the run's read-back bytes: a group is read whole for an excerpt of a few hundred bytes.
        left = max(0, state.limits.max_readback_bytes - state.readback_bytes)
        back = await reader.read(wanted, state.deadline, left)
        state.readback_bytes += back.read_bytes
        if back.error is not None:
            why = f"the archive read failed: {error_text(back.error)}"
            failure = error_type(back.error)
    out: list[str | None] = []
    unmapped: list[int] = []
    # Excerpts whose group was read at their revision but whose text is no piece of it: the archive
    # vouches for them no more than for an unread group's, so a whole erasure before hides them too.
    misfit: list[int] = []
    for at, (excerpt, seq) in enumerate(zip(excerpts, seqs, strict=True)):
        if seq is None:
            # A document as it is; a group of no session this run reads (the scope check drops
            # those before this) is never shown with its lines as they are.
            grouped = excerpt.ref.source_id.startswith("group/")
            out.append(_flat(excerpt.text) if grouped else excerpt.text)
            continue
        group = back.groups.get(seq)
        rendered = None
        if group is not None and group.digest == excerpt.ref.revision:
            rendered = render_group_excerpt(group, excerpt.text)
            if rendered is None:
                state.violation(
                    f"read returned an excerpt of {excerpt.ref.source_id!r} that is no piece of the group's "
                    "indexed text; shown on one line, its roles unchecked, unless the session was erased "
                    "whole before"
                )
                misfit.append(at)
        else:
            unmapped.append(at)
        out.append(rendered if rendered is not None else _flat(excerpt.text))
    if not unmapped and not misfit:
        return out
    unread = set(back.unread)
    over = [excerpts[at].ref.source_id for at in unmapped if seqs[at] in unread]
    unchecked = [excerpts[at].ref.source_id for at in unmapped if seqs[at] not in unread]
    if reader is not None and await _hidden_as_erased(reader, state, unchecked, why):
        unvouched = sorted([*unmapped, *misfit])
        for at in unvouched:
            out[at] = None
        ids = [excerpts[at].ref.source_id for at in unvouched]
        state.notes.append(
            f"{len(ids)} recalled group(s) hidden: this session id was erased whole before (or an erasure "
            "of it is under way), and the archive "
            "did not vouch for these groups at the excerpts' revisions (not held there, unread, "
            "unreadable, or the text no piece of the group), so they may be the erased session's: "
            + _listed(ids)
        )
        _log.warning(
            "%d recalled group(s) hidden: from a session erased whole before this one used its id, "
            "or under an erasure now",
            len(ids),
        )
        current_span_event("agentium.recall.group_erased", {"agentium.recall.hidden": len(ids)})
        return out
    if not unmapped:
        return out
    if over:
        state.notes.append(
            f"{len(over)} recalled group(s) were not read back: the read-back byte budget "
            f"(max_readback_bytes={state.limits.max_readback_bytes}) was spent; shown on one line each, "
            f"roles unchecked: {_listed(over)}"
        )
        _log.warning(
            "%d recalled group(s) shown without roles: not read back, past the read-back byte budget",
            len(over),
        )
        current_span_event("agentium.recall.group_unchecked", {"error.type": "byte_budget"})
    if unchecked:
        _unchecked(state, unchecked, why)
        _log.warning(
            "%d recalled group(s) shown without roles: not checked against the archive (%s)",
            len(unchecked),
            failure,
        )
        current_span_event("agentium.recall.group_unchecked", {"error.type": failure})
    return out


def _listed(ids: Sequence[str]) -> str:
    return ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")


def _unchecked(state: RoundState, ids: Sequence[str], why: str, shown: bool = True) -> None:
    reason = why or "the archive has no such group at the excerpt's revision"
    how = "; shown on one line each, roles unchecked" if shown else ""
    state.notes.append(
        f"{len(ids)} recalled group(s) could not be checked against the archive ({reason}){how}: "
        + _listed(ids)
    )


async def _hidden_as_erased(
    reader: GroupReader, state: RoundState, unchecked: Sequence[str], why: str
) -> bool:
    """Whether excerpts the archive did not vouch for are hidden: the session id was erased whole before.

    A session erased whole (its own erasure, its user's or its tenant's) and
    then used again starts over at seq 0, under the same source ids; a
    recall store that missed the erasure (down at the time, a stale
    replica) still answers with the erased groups' text. The archive holds
    none of them at their revisions, so an excerpt it cannot vouch for may
    be erased text, and is hidden. A session never erased whole keeps
    showing such excerpts on one line (a host indexing ahead of the
    runtime, an archive that is down). An erasure of the session under way
    (begun after the run loaded) hides them too: it may have removed their
    groups from the archive already, and the index names it only once it
    finishes. Asked only when an excerpt went unmapped; within the round's
    latency budget. When the erasure index
    cannot be read, whether they are erased text is not known: recall fails
    (:class:`Failed`), so the policy's ``on_failed`` decides and nothing of
    them is shown.
    """
    try:
        return await reader.erased_whole(state.deadline)
    except OperationCancelledError as exc:
        if not isinstance(exc, OperationTimeoutError):
            raise  # the run itself was cancelled
        cause: Exception = exc
    except Exception as exc:
        cause = exc
    if unchecked:
        _unchecked(state, unchecked, why, shown=False)
    if time.monotonic() >= state.deadline:
        raise Failed(
            f"recall erasure check not started or cut: the recall latency budget of "
            f"{state.limits.max_latency_s}s is spent; recalled groups the archive did not vouch for "
            "are not shown"
        ) from cause
    tail = "; recalled groups the archive did not vouch for are not shown"
    raise Failed(
        f"recall erasure check failed ({error_text(cause)}){tail}",
        f"recall erasure check failed ({error_type(cause)}){tail}",
    ) from cause
