"""OpenAI Agents SDK items to Agentium messages and back (an item's role and text: ``_item_message``).

Every item the SDK stores is kept whole in ``Message.payload`` (plain JSON,
part of the group's canonical bytes and digest) under :data:`ITEM_FORMAT`,
so ``get_items`` gives back exactly what ``add_items`` was given. ``content``
is a readable rendering of the item — what recall indexes, what summaries
read and what Agentium's own ``run()`` would send — never the item's JSON.

Roles: a message item keeps its role (``developer`` is Agentium's
``system``); an item that answers a call (``function_call_output``, the
other ``*_output`` items) is a ``tool`` message (``tool_call_id`` its
``call_id`` if core takes it); every other item (``function_call``,
``reasoning``…) is ``assistant`` output. Calls are not Agentium's structured
``tool_calls``: the SDK may store a call and its output in different
``add_items`` calls (an approval comes between), and core refuses half an
exchange of its own; a ``tool`` message with a payload needs no call, and
``run()`` shows it to the model as ``tool_output`` source data, never as the
user's words. Outputs stored earlier as ``user`` messages are shown so too.

A message Agentium's own ``run()`` committed (no payload) reads back as the
items the SDK would have stored for it (:func:`message_to_items`): its text
as a message item of its role, an assistant message's text only if it has
any, each tool call it made as a ``function_call`` item and a tool result
as a ``function_call_output`` item, never as ``user`` text.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, cast

from agentium_harness import CommitState, InvalidArgumentError, Message, Role
from agentium_harness.plugin_api import copy_plain_json

from ._call_ids import distinct_call_ids
from ._errors import ForeignItemError, PopRefusedError
from ._item_message import ITEM_FORMAT, MESSAGE_ROLES
from ._observe import left_out

__all__ = [
    "item_count",
    "items_count",
    "message_to_item",
    "message_to_items",
    "pop_item_of",
    "pop_span",
    "popped_item",
    "sdk_items",
    "view_items",
]


def _stored_shape(item: dict[str, Any]) -> bool:
    """Whether a stored item (decoded JSON: exact types) has the shape :func:`check_item_shape` holds to.

    What ``add_items`` refuses is never handed out either: an item of no input item's shape in
    stored history (another writer's, or damage) would be sent to the model on every later run.
    """
    kind, role = item.get("type"), item.get("role")
    if kind is None or kind == "message":
        if isinstance(role, str) and role in MESSAGE_ROLES:
            return True
        return kind is None and role is None and isinstance(item.get("id"), str)
    return isinstance(kind, str) and kind != ""


def _place(where: str | Callable[[], str]) -> str:
    return where() if callable(where) else where


def _sdk_item(message: Message, where: str | Callable[[], str]) -> dict[str, Any] | None:
    """A copy of the SDK item a message holds; ``None`` for a message without a payload (a native one).

    A payload of another format is another framework's item: reading it as an SDK item would
    be a guess, so :class:`ForeignItemError` is raised and nothing is skipped.
    """
    if message.payload_format == ITEM_FORMAT:
        payload = message.payload
        if not isinstance(payload, dict):
            raise ForeignItemError(
                f"{_place(where)} has payload_format {ITEM_FORMAT} but its payload is a "
                f"{type(payload).__name__}, not an item; the history is damaged (read it with "
                "read_history(view=False) to audit it)"
            )
        if not _stored_shape(payload):
            # Names no value of the item (it may be a user's words), as add_items' refusal.
            raise ForeignItemError(
                f"{_place(where)} has payload_format {ITEM_FORMAT} but no SDK item has that shape; "
                "the history is damaged (read it with read_history(view=False) to audit it)"
            )
        return cast("dict[str, Any]", copy_plain_json(payload))
    if message.payload_format is not None:
        raise ForeignItemError(
            f"{_place(where)} holds a {message.payload_format!r} item, not an OpenAI Agents SDK item "
            f"({ITEM_FORMAT}); this session id is used by another framework's integration: "
            "use another session id"
        )
    return None


def _native_items(message: Message, where: str | Callable[[], str]) -> list[dict[str, Any]]:
    """The Responses API input items the SDK would have stored for a message Agentium's ``run()`` committed.

    A tool result is the ``function_call_output`` answering its call (never ``user`` text: it
    may be a fetched page, and shown as the user's words it would speak for the user). An
    assistant message that made tool calls is its text as a message item (only if it has
    text), then one ``function_call`` item per call, its arguments as the JSON string the
    API carries. Any other message is one message item of its role.
    """
    if message.role is Role.TOOL:
        if message.tool_call_id is None:
            # Core refuses such a message at append: a tool result answering no call is damage.
            raise ForeignItemError(
                f"{_place(where)} is a tool result naming no call; the history is damaged (read it with "
                "read_history(view=False) to audit it)"
            )
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}]
    if not message.tool_calls:
        return [{"role": message.role.value, "content": message.content}]
    items: list[dict[str, Any]] = []
    if message.content:
        items.append({"role": message.role.value, "content": message.content})
    for call in message.tool_calls:
        arguments = json.dumps(
            call.arguments, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
        )
        items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments})
    return items


def message_to_items(message: Message, where: str | Callable[[], str]) -> list[dict[str, Any]]:
    """The SDK items a committed message stands for: new dicts the caller may change.

    A message this integration wrote is one item: a copy of its payload,
    equal to the item appended. The copy matters: the session reads with
    ``read_history(copy=False)``, which hands back the groups the adapters
    already decoded, so an item changed in place by the SDK or the host
    would otherwise change what every later read returns (the SDK's own
    sessions decode fresh items on every read). A message without a payload
    (committed by Agentium's own ``run()``) is the items the SDK would have
    stored for it: an assistant message's text as a message item (only if it
    has text) and each tool call it made as a ``function_call`` item
    (``call_id``, ``name``, ``arguments`` as a JSON string); a tool result as
    a ``function_call_output`` item (``call_id``, ``output``); any other
    message as ``{"role": ..., "content": ...}``. A payload of any other
    format is another framework's item: :class:`ForeignItemError`, nothing
    skipped. ``where`` names the message in an error (a function: built only then).
    A ``message`` that is not a :class:`Message` is
    :class:`~agentium_harness.InvalidArgumentError` (it raised ``AttributeError``).
    """
    if not isinstance(message, Message):
        raise InvalidArgumentError(f"message must be a Message, got {type(message).__name__}")
    item = _sdk_item(message, where)
    return [item] if item is not None else _native_items(message, where)


def message_to_item(message: Message, where: str | Callable[[], str]) -> dict[str, Any]:
    """The one SDK item a committed message stands for (see :func:`message_to_items`).

    A message of several items (an assistant message of Agentium's own
    ``run()`` that made tool calls, with text or more than one call) raises
    :class:`ForeignItemError`: read it with :func:`message_to_items`.
    """
    items = message_to_items(message, where)
    if len(items) != 1:
        raise ForeignItemError(
            f"{_place(where)} stands for {len(items)} SDK items (an assistant message of Agentium's own "
            "run() with its tool calls), not one: read it with message_to_items"
        )
    return items[0]


def item_count(message: Message) -> int:
    """How many SDK items ``message`` reads back as (:func:`message_to_items`), without making them."""
    if message.payload_format is not None or message.role is Role.TOOL or not message.tool_calls:
        return 1
    return len(message.tool_calls) + (1 if message.content else 0)


def items_count(messages: Sequence[Message]) -> int:
    """How many SDK items one group's shown ``messages`` read back as (:func:`view_items`), unmade.

    A message with a payload is one item: only a native message (no payload) is counted by a
    call. A native ``function_call`` counts only once a result of its group answers it: a call
    whose result was retracted is not read back (see :func:`view_items`), so it is no item.
    """
    count = len(messages)
    unanswered: dict[str | None, int] | None = None  # native call id -> its calls not yet answered
    for message in messages:
        if message.payload_format is not None:
            continue
        if message.role is Role.TOOL:
            if unanswered and unanswered.get(message.tool_call_id):
                unanswered[message.tool_call_id] -= 1
                count += 1  # its call, read back now that it is answered
        elif message.tool_calls:
            count -= 0 if message.content else 1  # its text is an item only if it has text
            if unanswered is None:
                unanswered = {}
            for call in message.tool_calls:
                unanswered[call.id] = unanswered.get(call.id, 0) + 1
    return count


def pop_item_of(message: Message, where: str, *, retracted: bool = False) -> dict[str, Any]:
    """The one item ``pop_item`` may retract ``message`` as; :class:`PopRefusedError` when there is none.

    Core retracts whole messages. A message of Agentium's own ``run()`` that stands for
    several items (an assistant's text and its tool calls) would take items out without
    returning them; a tool result alone would leave its call without output in the view
    (read back, an API error). Both are refused before anything is retracted. ``retracted``:
    the message was retracted already (the retraction's own result holds it: an erasure
    and the id used again came between ``pop_item``'s read and its retraction), so an
    error says so, not that nothing was, and its ``commit_state`` is ``committed``.
    """
    try:
        items = message_to_items(message, where)
    except ForeignItemError as exc:
        if not retracted:
            raise
        refused = ForeignItemError(f"{exc}; {_RETRACTED_ALREADY}")
        refused.commit_state = CommitState.COMMITTED
        raise refused from exc
    outcome = _RETRACTED_ALREADY if retracted else "so nothing was retracted"
    refusal: PopRefusedError | None = None
    if message.payload_format is None and message.role is Role.TOOL:
        refusal = PopRefusedError(
            f"{where} is a tool result of Agentium's own run() (a function_call_output); retracting "
            f"it alone would leave its function_call without output in the view, {outcome}: "
            "clear_session() starts the view afresh, or the runtime's retract(identity, "
            "session_id, count=n, reason=...) takes out the last n whole messages, the call's included"
        )
    elif len(items) != 1:
        refusal = PopRefusedError(
            f"{where} was committed by Agentium's own run() and stands for {len(items)} SDK items (an "
            "assistant's text and its tool calls); pop_item retracts one message and returns one item, "
            f"{outcome}: clear_session() starts the view afresh, or the runtime's "
            "retract(identity, session_id, count=n, reason=...) takes out the last n whole messages"
        )
    if refusal is not None:
        if retracted:
            refusal.commit_state = CommitState.COMMITTED
        raise refusal
    return items[0]


def _shows_no_item(message: Message) -> bool:
    """Whether ``message``, among the view's last ones with no result after it, is left out of every read.

    A native assistant message of tool calls and no text whose calls no result after it answers:
    :func:`view_items` leaves such calls out (sent without their output, the API refuses them).
    """
    return (
        message.payload_format is None
        and message.role is not Role.TOOL
        and bool(message.tool_calls)
        and not message.content
    )


def pop_span(messages: Sequence[Message]) -> int:
    """How many of the view's last ``messages`` ``pop_item`` retracts; 0 when none is read as an item.

    The last message a read shows as an item, and the messages after it no read shows (native
    calls whose results a host's ``retract`` took: :func:`_shows_no_item`, each with only such
    messages after it). Popping only those would return an item ``get_items`` never gave and
    leave the view reading the same; they go with the item before them instead.
    """
    for taken, message in enumerate(reversed(messages), 1):
        if not _shows_no_item(message):
            return taken
    return 0


def popped_item(
    taken: Sequence[Message], read: Sequence[Message], item: dict[str, Any], where: str
) -> dict[str, Any]:
    """What ``pop_item`` returns having retracted ``taken``: ``item`` (of ``read[0]``) if they are ``read``.

    Otherwise the retraction took another session's messages (an erasure and the id used
    again between the read and the retraction, on a store that hands out a revision twice):
    the item of the one of them a read shows, never the erased one. Retracted already, any
    refusal says so (``commit_state`` ``committed``), as :func:`pop_item_of` with ``retracted``.
    """
    if tuple(taken) == tuple(read):
        return item
    if len(taken) != pop_span(taken):  # more than one of them is read as items
        refused = PopRefusedError(f"{where} are {len(taken)} messages of several items; {_RETRACTED_ALREADY}")
        refused.commit_state = CommitState.COMMITTED
        raise refused
    return pop_item_of(taken[0], where, retracted=True)


#: What a refusal of a message ``pop_item`` retracted already says (see :func:`pop_item_of`).
_RETRACTED_ALREADY: Final = (
    "pop_item retracted it all the same (the session was erased and its id used again between "
    "pop_item's read and its retraction, which took the new session's last message): it left the view, "
    "nothing was deleted (read_history(view=False) shows it), and no item is returned"
)


#: A message's ``payload_format`` and ``payload``, read at C speed by ``map`` (no frame per message).
_FORMAT_OF: Final = operator.attrgetter("payload_format")
_PAYLOAD_OF: Final = operator.attrgetter("payload")


def sdk_items(messages: Sequence[Message], limit: int | None) -> list[dict[str, Any]] | None:
    """What :func:`view_items` returns when the newest ``limit`` messages (all: ``None``) are all SDK items.

    ``None`` when one of them is anything else (a native message, another format, a damaged
    payload): :func:`view_items` reads those (and raises for damage). Each SDK item is one item
    that pairs with nothing, so the newest ``limit`` items are the newest ``limit`` messages,
    whatever the messages before them are. A history the SDK alone wrote is read here without
    a call, a list or a pairing entry per message: one copy of each payload (new dicts the
    caller may change, see :func:`message_to_items`), as before native messages were read.
    """
    window = messages if limit is None or limit >= len(messages) else messages[len(messages) - limit :]
    if not window:
        return []
    # Sets built by ``map`` at C speed: one check for the whole window rather than one per message.
    if set(map(_FORMAT_OF, window)) != {ITEM_FORMAT}:
        return None
    payloads = list(map(_PAYLOAD_OF, window))
    if set(map(type, payloads)) != {dict} or not all(map(_stored_shape, payloads)):
        return None  # a damaged payload: view_items names the message in its error
    return list(map(copy_plain_json, payloads))


def _exchange_starts(
    messages: Sequence[Message], groups: Sequence[int]
) -> tuple[list[int], set[int], dict[int, set[int]]]:
    """For each item read back, the index of the first item that must be read with it; orphans; hidden calls.

    A native ``function_call_output`` must be read with its ``function_call``
    (matched in its own group, the earliest call with its id still
    unanswered, as core pairs them: a call id a model used again in another
    turn pairs with its own turn's result); every other item only with
    itself. A native call no result of its group answers (the host retracted
    its result) is not read back: the third value maps a message's index to
    the indexes, among its :func:`message_to_items`, of such calls; the
    first value has no entry for them. An item this SDK stored is left as
    the SDK stored it, unpaired, as the SDK's own sessions do. Nothing is
    converted. The second value holds the indexes of native tool results
    answering no earlier call of their group (damage: core commits no such
    group), each with start ``-1``.
    """
    open_calls: dict[tuple[int, str | None], list[tuple[int, int]]] = {}  # (group, id) -> (message, item)
    answers: dict[int, tuple[int, int]] = {}  # a native result's message -> the call it answers
    orphans: set[int] = set()
    for at, (message, group) in enumerate(zip(messages, groups, strict=True)):
        if message.payload_format is not None:
            continue
        if message.role is Role.TOOL:
            pending = open_calls.get((group, message.tool_call_id))
            if pending:
                answers[at] = pending.pop(0)
            else:
                orphans.add(at)
        elif message.tool_calls:
            first = 1 if message.content else 0  # its text, if it has any, is its first item
            for n, call in enumerate(message.tool_calls):
                open_calls.setdefault((group, call.id), []).append((at, first + n))
    hidden: dict[int, set[int]] = {}
    for pending in open_calls.values():
        for at, n in pending:
            hidden.setdefault(at, set()).add(n)
    starts: list[int] = []
    call_items: dict[tuple[int, int], int] = {}  # (message, item) of a call -> its index among the items
    for at, message in enumerate(messages):
        if message.payload_format is not None:
            starts.append(len(starts))
        elif at in answers:
            starts.append(call_items[answers[at]])
        elif at in orphans:
            starts.append(-1)
        else:
            dropped = hidden.get(at, ())
            for n in range(item_count(message)):
                if n not in dropped:
                    call_items[at, n] = len(starts)
                    starts.append(len(starts))
    return starts, orphans, hidden


def view_items(
    messages: Sequence[Message], groups: Sequence[int], where: Callable[[int], str], limit: int | None
) -> list[dict[str, Any]]:
    """The items of a view's ``messages`` (``groups``: each one's group label): the newest ``limit`` at most.

    New dicts (:func:`message_to_items`). Where the newest ``limit`` items
    would begin between a native ``function_call`` and its
    ``function_call_output`` (the output sent without its call is an API
    error), the read begins after that exchange instead: fewer items, never
    more than ``limit``, never half an exchange. Each native exchange gets a
    call id of its own (:func:`._call_ids.distinct_call_ids`). A native ``function_call``
    that no result of its group answers in the view (the host retracted the
    result) is left out: sent without its output, it is an API error too
    (the SDK's runner and ``run()`` drop it as well). Only the items
    returned are made, so damage before them does not fail the read.
    """
    starts, orphans, hidden = _exchange_starts(messages, groups)
    begin = 0
    if limit is not None:
        begin = len(starts)
        lowest = len(starts)  # the lowest exchange start of the items from ``at`` on
        for at in range(len(starts) - 1, max(0, len(starts) - limit) - 1, -1):
            lowest = min(lowest, starts[at])
            if lowest >= at:
                begin = at
    items: list[dict[str, Any]] = []
    native: dict[int, int] = {}  # a returned native call or output item -> its call's (distinct_call_ids)
    offset = 0  # the index of the message's first item
    hidden_out = 0  # calls left out of the messages read: a degraded read, reported (._observe)
    for at, message in enumerate(messages):
        dropped = hidden.get(at)
        count = item_count(message) - (len(dropped) if dropped else 0)
        if offset + count > begin:
            if at in orphans:
                # Core commits no group holding a result without its call, and a read takes whole
                # groups (as the view shows them, a prefix): damage, refused rather than shown alone.
                raise ForeignItemError(
                    f"{where(at)} is a tool result answering no earlier call of its group; the history is "
                    "damaged (read it with read_history(view=False) to audit it)"
                )
            made = message_to_items(message, partial(where, at))
            if dropped:
                made = [item for n, item in enumerate(made) if n not in dropped]
                hidden_out += len(dropped)
            skipped = max(0, begin - offset)
            if message.payload_format is None and (message.tool_calls or message.role is Role.TOOL):
                for n in range(offset + skipped, offset + len(made)):  # its items' indexes in the view
                    if made[n - offset].get("type") in ("function_call", "function_call_output"):
                        native[n - begin] = starts[n] - begin  # a call's start is itself
            items.extend(made[skipped:])
        offset += count
    if native:
        distinct_call_ids(items, native)
    if hidden_out:
        left_out(hidden_out)
    return items
