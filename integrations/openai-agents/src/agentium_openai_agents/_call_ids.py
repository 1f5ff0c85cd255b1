"""Call ids of Agentium's own ``run()`` exchanges, made distinct within one ``get_items`` read.

Models reuse call ids across turns (local models number them per response:
``call_0`` every turn). The SDK dedupes the input it sends by call id,
keeping the first position of a ``function_call`` with the latest value and
the latest ``function_call_output``: two turns of one id reach the model
mispaired (the first turn shows the second turn's call, its own output is
gone). The SDK's own session stores and returns its items so; items this
SDK stored are returned exactly as given, so they stay so. The items a read
makes for ``run()``'s native exchanges are this integration's own, and each
gets an id of its own instead, which no later call of the read uses.

The id of its own has the form of core's (``agentium_harness``'s ``run()``
renames a reused id so; ``plugin_api.own_id_form`` makes it): ``"<id>_<n>"``,
at most 64 characters, or for an id of nine ASCII letters and digits
(Mistral's form) the id with its last characters replaced by ``n``. It adds only ``_`` and
digits: the SDK reaches Anthropic, Bedrock and Mistral through LiteLLM, and
they refuse any other character (``[A-Za-z0-9_-]``; Mistral: nine letters
and digits). An id ``run()`` committed as ``"<id>#<n>"`` for a while is
named from the form ``run()`` sends it in, ``plugin_api.sent_id_form``
(``"<id>_<n>"``): ``#`` is outside those alphabets, and the SDK sent it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentium_harness.plugin_api import own_id_form, sent_id_form

__all__ = ["distinct_call_ids"]


def distinct_call_ids(items: list[dict[str, Any]], native: Mapping[int, int]) -> None:
    """Give, in place, every native exchange in ``items`` a call id of its own: ``"<id>_<n>"``.

    ``native`` maps the index of each native ``function_call`` item to itself
    and each native ``function_call_output`` item to its call's index. A
    native call whose id ``n`` later calls in ``items`` use (native or not)
    becomes ``"<id>_<n>"`` (core's ``own_id_form`` of its ``sent_id_form``; ``n`` raised until no item uses
    it), and so do its outputs. The newest is renamed too (``"<id>_0"``): the model's next call
    may use its id again (local models number their calls per response), in
    the very run that read it, and the SDK's dedupe would then show the
    model that call in this exchange's place, this exchange's output gone;
    so would an earlier call the SDK stored with its id (never renamed).
    ``items`` is the newest of the view (a read's items are always its
    newest), so every later call is in it: an exchange gets the same id in
    every read that returns it, until a later turn uses its id again.
    """
    later: dict[str, int] = {}  # call id -> the calls of it after the item looked at
    renamed: dict[int, str] = {}  # a native call's index -> its id of its own
    used: set[object] | None = None
    for at in range(len(items) - 1, -1, -1):
        item = items[at]
        call_id = item.get("call_id")
        if item.get("type") != "function_call" or not isinstance(call_id, str):
            continue
        seen = later.get(call_id, 0)
        later[call_id] = seen + 1
        if native.get(at) == at:
            if used is None:
                used = {other.get("call_id") for other in items}
            n = seen
            base = sent_id_form(call_id)  # an old "<id>#<n>" id: no '#' in what the SDK sends
            while (own := own_id_form(base, n)) in used:
                n += 1
            used.add(own)
            renamed[at] = own
    for at, call in native.items():
        if call in renamed:
            items[at]["call_id"] = renamed[call]
