"""Call ids of Agentium's own ``run()`` exchanges, made distinct within one ``get_items`` read.

Models reuse call ids across turns (local models number them per response:
``call_0`` every turn). The SDK dedupes the input it sends by call id,
keeping the first position of a ``function_call`` with the latest value and
the latest ``function_call_output``: two turns of one id reach the model
mispaired (the first turn shows the second turn's call, its own output is
gone). The SDK's own session stores and returns its items so; items this
SDK stored are returned exactly as given, so they stay so. The items a read
makes for ``run()``'s native exchanges are this integration's own, and get
an id of their own instead where a later call of the read uses theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["distinct_call_ids"]


def distinct_call_ids(items: list[dict[str, Any]], native: Mapping[int, int]) -> None:
    """Rename, in place, the native exchanges whose call id another ``function_call`` in ``items`` uses.

    ``native`` maps the index of each native ``function_call`` item to itself
    and each native ``function_call_output`` item to its call's index. A call
    whose id ``n`` later calls in ``items`` use (native or not) becomes
    ``"<id>#<n>"`` (``#`` added until no item uses it), and so do its
    outputs. ``items`` is the newest of the view (a read's items are always
    its newest), so every later call is in it: an exchange gets the same id
    in every read that returns it, until a later turn uses its id again; the
    newest call of an id keeps it as stored, unless an earlier call the SDK
    stored is in ``items`` with it: that one is never renamed, so the native
    call becomes ``"<id>#0"`` (the SDK's dedupe would otherwise put it, with
    its output, in the SDK call's place and drop that call's output).
    """
    later: dict[str, int] = {}  # call id -> the calls of it after the item looked at
    renamed: dict[int, str] = {}  # a native call's index -> its id of its own
    used: set[object] | None = None
    # Call id -> the index of the first function_call the SDK stored with it (never renamed).
    sdk_first: dict[str, int] = {}
    for at, item in enumerate(items):
        call_id = item.get("call_id")
        if item.get("type") == "function_call" and isinstance(call_id, str) and native.get(at) != at:
            sdk_first.setdefault(call_id, at)
    for at in range(len(items) - 1, -1, -1):
        item = items[at]
        call_id = item.get("call_id")
        if item.get("type") != "function_call" or not isinstance(call_id, str):
            continue
        seen = later.get(call_id, 0)
        later[call_id] = seen + 1
        if native.get(at) == at and (seen or sdk_first.get(call_id, at) < at):
            if used is None:
                used = {other.get("call_id") for other in items}
            own = f"{call_id}#{seen}"
            while own in used:
                own += "#"
            used.add(own)
            renamed[at] = own
    if renamed:
        for at, call in native.items():
            if call in renamed:
                items[at]["call_id"] = renamed[call]
