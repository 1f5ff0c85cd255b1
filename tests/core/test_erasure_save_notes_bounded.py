"""An erasure record resumed again and again, each call stopping, does not grow with each call.

Each progress save leaves a note naming its call (``progress save <n> of
call <id>``: :class:`~agentium_harness._engine.erasure_resume.Tried`), so
that a save whose reply was lost is counted once whoever saved on top. A
call that stops leaves its note behind, and only the call that writes the
tombstone drops its own. Before, a store failing for a while, with its
erasure resumed each time (an operator's or a scheduler's
``agentium erase --resume``), left one note per call in the record, then
in the tombstone and in each index header of it, for good: the record,
and what ``erasure_status`` shows the operator, grew without bound. The
record keeps the notes of the calls that saved last, at most
:data:`~agentium_harness._engine.erasure_resume.MARKS_KEPT`; its other
notes stay as they were.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from _erasure_harness import ANA, OPERATOR, TARGET, HookedSQLiteArchive

from agentium_harness import ErasureIncompleteError, ErasureState, create_harness_runtime
from agentium_harness._engine.erasure_resume import MARKS_KEPT
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import EraseTarget

pytestmark = pytest.mark.anyio

_MARK = re.compile(r"progress save \d+ of call [0-9a-f]{16}")


class _Failing:
    """The archive's erase calls that delete (not its dry runs) fail while ``failing``."""

    def __init__(self) -> None:
        self.failing = True

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if self.failing and not kwargs.get("dry_run", False):
            raise OSError("archive unreachable")


def _marks(notes: tuple[str, ...]) -> list[str]:
    return [n for n in notes if _MARK.fullmatch(n)]


async def test_a_record_resumed_again_and_again_keeps_a_bounded_number_of_save_notes(tmp_path: Path) -> None:
    hook = _Failing()
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=HookedSQLiteArchive(config, hook),
        session_store=SQLiteSessionStore(config),
    )
    try:
        for i in range(3):
            await runtime.run(ANA, "s1", f"turn {i}")
        with pytest.raises(ErasureIncompleteError):
            await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR)
        calls = MARKS_KEPT + 4
        for _ in range(calls):  # each resume stops on the same failing store
            with pytest.raises(ErasureIncompleteError):
                await runtime.resume_erasures(OPERATOR)
        (pending,) = await runtime.erasure_status(OPERATOR)
        assert pending.state is ErasureState.PENDING
        assert 1 <= len(_marks(pending.notes)) <= MARKS_KEPT
        # The other notes are untouched: the failure, said once however often a resume met it.
        (stopped,) = (n for n in pending.notes if not _MARK.fullmatch(n))
        assert stopped.startswith("stopped: OSError")

        hook.failing = False
        (result,) = await runtime.resume_erasures(OPERATOR)
        assert result.tombstone is not None
        assert len(_marks(result.tombstone.notes)) <= MARKS_KEPT
        (finished,) = await runtime.erasure_status(OPERATOR)  # its index header
        assert finished.state is ErasureState.COMPLETE
        assert finished.notes == result.tombstone.notes
        assert stopped in finished.notes
    finally:
        await runtime.aclose()
