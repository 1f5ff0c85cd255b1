"""``forget(erase_sources=True)``: the memory manager's own state words leave once a source was erased.

An exception no stage typed (an engine bug) in the memory manager's forget
leaves it typed, its own ``commit_state`` and words ("nothing was written
(commit_state not_committed)", "whether it was written is unknown", "it
stands (commit_state committed)"). Once a source's erasure stood,
``forget`` marked it ``unknown`` but kept those words: the message said
``not_committed`` and then ``unknown``; and a forget the store had
acknowledged (``committed``: the fact is forgotten) went out ``unknown``.
The call's state now replaces them, ``committed`` once the fact was.
"""

from __future__ import annotations

from typing import Any

import pytest
from _forget_support import OPERATOR, SCOPE, fact_from, forget_runtime

from agentium_harness import (
    AgentiumError,
    CommitState,
    SessionKey,
)
from agentium_harness._engine.memory import base, writes
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio


def _bug(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug")


@pytest.mark.parametrize(
    ("where", "state"),
    [
        ("before", CommitState.UNKNOWN),  # before the store's write: the erasure stands
        ("during", CommitState.UNKNOWN),
        ("after", CommitState.COMMITTED),  # the store acknowledged it: the fact is forgotten
    ],
)
async def test_the_managers_words_give_way_to_the_calls(
    where: str, state: CommitState, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = InMemoryArchive()
    rt = forget_runtime(archive)
    try:
        key = SessionKey("acme", "ana", "s1")
        fact_id = await fact_from(rt, archive, "s1")
        if where == "before":
            monkeypatch.setattr(writes, "checked_scope", _bug)
        elif where == "during":
            monkeypatch.setattr(writes, "checked_ack", _bug)
        else:
            monkeypatch.setattr(base.MemoryManagerBase, "_event", _bug)
        with pytest.raises(AgentiumError, match="memory forget failed with an unexpected error") as caught:
            await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
        said = str(caught.value)
        assert await archive.read_groups(key, 0, 1, OpContext()) == []  # its source's erasure stands
        assert caught.value.commit_state is state, said
        assert said.count("commit_state") == 1, said
        assert f"(commit_state {state.value})" in said
        if state is CommitState.UNKNOWN:
            assert "the erasures of its sources that completed stand" in said
            assert "nothing was written" not in said
        if where == "before":
            # The manager's forget failed before its store's write began: the fact is known not forgotten.
            assert "before the store's forget began: the fact was not forgotten" in said, said
            assert "may be forgotten" not in said, said
        elif where == "during":
            # Failed as it forgot the fact (its sources erased): whether it is forgotten cannot be told.
            assert "it failed while forgetting the fact" in said and "may be forgotten" in said, said
    finally:
        await rt.aclose()
