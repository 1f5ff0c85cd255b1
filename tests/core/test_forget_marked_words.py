"""``forget(erase_sources=True)``: what a later refusal loses, once a source was erased, is its claims only.

Once one source's erasure completed, a typed error of a later one is the
call's (``unknown``; the erasures that completed stand) and its claims of
having erased, written or changed nothing leave it (``said_by_the_call``).
Those claims were removed as bare substrings, so a claim written as a
sentence ("... has finished. Nothing was erased", a run holding the second
session) stayed, beside "the erasures of its sources that completed stand";
one that went on ("nothing was written or deleted. Restore it") lost its
head and left "could repeat or deleted"; and one quoted inside a cause's
parentheses (the store call the wrapping error names) was cut out of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from _forget_support import OPERATOR, SCOPE, fact_from, forget_runtime

from agentium_harness import (
    CommitState,
    SessionBusyError,
    SessionKey,
    SessionStoreError,
)
from agentium_harness._engine import erasure_api
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

_FLOOR = (
    "s3 session store: the revision floor object is damaged (it does not decode, or does not match its "
    "checksum), so revisions of erased sessions could repeat; nothing was written or deleted. Restore it "
    "from a version the bucket keeps"
)
_WRAPPED = (
    f"the record of the erasure could not be saved ({_FLOOR}); it is pending: fix the cause, then resume it"
)


async def test_a_run_holding_the_second_session_leaves_no_nothing_was_erased() -> None:
    archive = InMemoryArchive()
    rt = forget_runtime(archive)
    try:
        fact_id = await fact_from(rt, archive, "s1", "s2")
        async with rt.parts.admission.admit(SessionKey("acme", "ana", "s2"), "run"):
            with pytest.raises(SessionBusyError) as caught:
                await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
        said = str(caught.value)
        assert await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, OpContext()) == []
        assert caught.value.commit_state is CommitState.UNKNOWN, said
        assert "the erasures of its sources that completed stand" in said
        assert "othing was erased" not in said, said
        assert "erase once it has finished; it failed once it began erasing" in said, said
        # Refused before it forgot the fact (its sources first): known not forgotten, not "may be".
        assert "before forgetting it: the fact was not forgotten" in said and "may be forgotten" not in said
    finally:
        await rt.aclose()


@pytest.mark.parametrize(
    ("raised", "kept"),
    [
        (_FLOOR, _FLOOR.replace("; nothing was written or deleted.", ".")),
        (_WRAPPED, _WRAPPED),  # the cause quoted as it was: the store call's own words
    ],
)
async def test_a_claim_goes_whole_and_a_quoted_cause_stays(
    raised: str, kept: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = InMemoryArchive()
    real = erasure_api.run_erasure
    erased: list[str] = []

    async def run_erasure(runtime: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        if erased:
            raise SessionStoreError(raised)
        result = await real(runtime, target, *args, **kwargs)
        erased.append(str(target.session_id))
        return result

    monkeypatch.setattr(erasure_api, "run_erasure", run_erasure)
    rt = forget_runtime(archive)
    try:
        fact_id = await fact_from(rt, archive, "s1", "s2")
        with pytest.raises(SessionStoreError) as caught:
            await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
        said = str(caught.value)
        assert caught.value.commit_state is CommitState.UNKNOWN, said
        assert said.startswith(f"{kept}; it failed once it began erasing"), said
        assert "repeat or deleted" not in said
    finally:
        await rt.aclose()
