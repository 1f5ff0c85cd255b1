"""A call whose erasure another call completed, and which cannot erase what was written since.

As in :mod:`test_erasure_resumed_meanwhile`: the first call's erasure is
completed by another runtime's resume while the first takes its inventory,
and a run then writes to the session (its fence is down). The first call
must erase that under a new erasure. When it cannot — an overlapping
erasure is pending and refuses a new one, or it has started as many new
ones as it may — it must not return a tombstone (the target still holds
data) nor an ``ErasureIncompleteError`` saying the completed erasure "stays
pending": it raises :class:`ErasureOvertakenError`, with the completed
erasure's tombstone, the stores still holding data, and the pending
erasure's id (if one refused it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, PENDING, TARGET, hooked_runtimes

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureOvertakenError,
    ErasureState,
    SessionKey,
)
from agentium_harness._engine import erasure, erasure_run
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, EraseLevel, OpContext

pytestmark = pytest.mark.anyio

USER = EraseTarget.user("acme", "ana")


class _Gate:
    """The first inventory (a dry run of more than one item) after ``armed`` waits for ``release``.

    A real erase of a user target fails (that erasure stays pending).
    """

    def __init__(self) -> None:
        self.armed = False
        self.entered, self.release = anyio.Event(), anyio.Event()

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if target.level is EraseLevel.USER and not kwargs.get("dry_run", False):
            raise OSError("archive unreachable")  # a real erase of a user target fails: it stays pending
        if kwargs.get("dry_run", False) and self.armed and kwargs.get("max_items", 0) > 1:
            self.armed = False
            self.entered.set()
            with anyio.fail_after(30):
                await self.release.wait()


def _runtimes(stores: str, tmp_path: Path) -> tuple[Any, Any, Any, Any]:
    archive, sessions, made = hooked_runtimes(stores, tmp_path, _Gate(), 3)
    return archive, sessions, made[0], (made[1], made[2])


async def _overtake(
    archive: Any, first: Any, other: Any, then: Any = None
) -> tuple[Any, list[BaseException]]:
    """The first call's erasure completed by ``other`` during its inventory; a run writes; ``then()``."""
    errors: list[BaseException] = []
    results: list[Any] = []

    async def erase_first() -> None:
        try:
            results.append(await first.erase(TARGET, reason="dsr", attestation=OPERATOR))
        except ErasureIncompleteError as exc:
            errors.append(exc)

    gate = archive.hook
    gate.armed = True
    async with anyio.create_task_group() as tg:
        tg.start_soon(erase_first)
        with anyio.fail_after(30):
            await gate.entered.wait()
        resumed = await other.erase(TARGET, reason="dsr", attestation=OPERATOR)
        assert resumed.tombstone is not None
        await other.run(ANA, "s1", "after the erasure")
        if then is not None:
            await then()
        gate.release.set()
    assert not results, "a tombstone was returned while the target still holds data"
    return resumed, errors


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_new_erasure_refused_by_an_overlapping_pending_one_is_reported_truthfully(
    stores: str, tmp_path: Path
) -> None:
    archive, sessions, first, (other, third) = _runtimes(stores, tmp_path)
    try:
        await first.run(ANA, "s1", "before the erasure")
        refusing: list[str] = []

        async def user_erasure_stops() -> None:
            # An erasure of the user, overlapping the session, stops part way and stays pending.
            with pytest.raises(ErasureIncompleteError) as caught:
                await third.erase(USER, reason="dsr", attestation=OPERATOR)
            refusing.append(caught.value.record.erasure_id)

        resumed, errors = await _overtake(archive, first, other, user_erasure_stops)
        (error,) = errors
        (pending_id,) = refusing
        assert isinstance(error, ErasureOvertakenError), (type(error), str(error))
        # The completed erasure is reported complete, not "pending": its tombstone, as stored.
        assert error.record == resumed.record and error.record.state is ErasureState.COMPLETE
        assert error.pending_id == pending_id and pending_id in str(error)
        assert "session_store" in error.still_held
        stored = await sessions.load(PENDING, OpContext())
        assert stored is not None and stored.snapshot.ledger is not None
        assert [r.erasure_id for r in stored.snapshot.ledger.records] == [pending_id]
        key = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"e-{resumed.record.erasure_id}")
        kept = await sessions.load(key, OpContext())
        assert kept is not None and kept.snapshot.ledger.records[0].state is ErasureState.COMPLETE
    finally:
        for runtime in (first, other, third):
            await runtime.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_call_past_its_new_erasures_bound_says_the_target_may_still_hold_data(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound on new erasures reached (set to 0 here: the first new one would pass it)."""
    monkeypatch.setattr(erasure_run, "_AGAIN_AT_MOST", 0)
    archive, sessions, first, (other, third) = _runtimes(stores, tmp_path)
    try:
        await first.run(ANA, "s1", "before the erasure")
        resumed, errors = await _overtake(archive, first, other)
        (error,) = errors
        assert isinstance(error, ErasureOvertakenError), (type(error), str(error))
        assert error.record == resumed.record and error.pending_id == ""
        assert "session_store" in error.still_held
        # Nothing is pending: the data written since is still there, and the error says so.
        stored = await sessions.load(PENDING, OpContext())
        assert stored is None or not stored.snapshot.ledger.records
        page = await first.read_history(ANA, "s1", max_groups=100, view=False)
        assert [m.content for g in page.groups for m in g.messages if m.role.value == "user"] == [
            "after the erasure"
        ]
        assert "may still hold" in str(error)
    finally:
        for runtime in (first, other, third):
            await runtime.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_new_erasure_whose_join_landed_then_failed_is_named_not_said_unstarted(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new erasure's join lands, then raises: it is pending (scope refused), and the error names it."""
    archive, sessions, first, (other, third) = _runtimes(stores, tmp_path)
    try:
        await first.run(ANA, "s1", "before the erasure")

        async def join_lands_then_fails() -> None:
            real = erasure.update_ledger_from

            async def landed(*args: Any, **kwargs: Any) -> Any:
                await real(*args, **kwargs)
                raise OSError("reply lost")

            monkeypatch.setattr(erasure, "update_ledger_from", landed)

        resumed, errors = await _overtake(archive, first, other, join_lands_then_fails)
        monkeypatch.undo()
        (error,) = errors
        assert isinstance(error, ErasureOvertakenError), (type(error), str(error))
        assert error.record == resumed.record and error.record.state is ErasureState.COMPLETE
        # The new erasure joined: it is pending and named, not "could not be started" with none named.
        stored = await sessions.load(PENDING, OpContext())
        assert stored is not None and stored.snapshot.ledger is not None
        [joined] = stored.snapshot.ledger.records
        assert joined.erasure_id != resumed.record.erasure_id and joined.target == TARGET
        assert error.pending_id == joined.erasure_id and joined.erasure_id in str(error)
        # Erasing again resumes it, as the error says, and the data written since goes.
        again = await third.erase(TARGET, reason="dsr", attestation=OPERATOR)
        assert again.resumed and again.record.erasure_id == joined.erasure_id and again.tombstone is not None
        assert not (await third.inspect_session(ANA, "s1")).exists
    finally:
        for runtime in (first, other, third):
            await runtime.aclose()
