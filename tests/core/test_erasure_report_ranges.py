"""A store's erase report listing one session's groups in more runs than the call allows is refused.

Each run of consecutive seqs a report lists becomes a range of the erasure's record, kept
exact for good (the tombstone): a report of a million scattered seqs made a record of a
million ranges. One session's groups in one report may form at most the call's item bound
of runs, or ``MAX_ERASE_RANGES`` (1,024) when that is larger (the real calls are bounded to
1,000 items, the dry runs to 100,000). More is a :class:`ContractViolationError` on the
path of every other bad report: a dry run raises it, a real erasure stops pending with
nothing of the report kept, and completes once the adapter behaves. Consecutive groups are
one range however many.
"""

from __future__ import annotations

import pytest
from _erasure_report_harness import (
    ALICE,
    GOOD,
    KEY,
    OPERATOR,
    S1,
    BadReportArchive,
    Tamper,
    dry_run_refused,
    runtime,
    stops_pending_then_resumes,
    with_groups,
)

from agentium_harness import ErasureRecord
from agentium_harness._ports.erasure import MAX_ERASE_RANGES
from agentium_harness.plugin_api import EraseReport

pytestmark = pytest.mark.anyio

#: Items a dry run counts per store at most (``_engine/erasure.py``'s ``_PLAN_ITEMS``).
PLAN_ITEMS = 100_000
#: Past the session's own groups (its snapshot holds group 0 only): only the reports name them.
FIRST = 7


def _scattered(runs: int) -> Tamper:
    """Groups at every other seq from ``FIRST``: ``runs`` runs of one group each (a hole between)."""
    return with_groups(*((FIRST + 2 * i, GOOD) for i in range(runs)))


def _none_named(record: ErasureRecord) -> None:
    assert not any(seq in r for s in record.sessions for r in s.ranges for seq in (FIRST, FIRST + 2))


async def test_a_dry_run_refuses_more_runs_of_seqs_than_its_bound_as_a_contract_violation() -> None:
    refused = await dry_run_refused(BadReportArchive(_scattered(PLAN_ITEMS + 1), "dry"), "runs")
    assert f"{PLAN_ITEMS + 1} runs" in str(refused)


@pytest.mark.parametrize(("on", "runs"), [("real", MAX_ERASE_RANGES + 1), ("dry", PLAN_ITEMS + 1)])
async def test_an_erasure_meeting_more_runs_of_seqs_than_its_bound_stops_pending(on: str, runs: int) -> None:
    await stops_pending_then_resumes(BadReportArchive(_scattered(runs), on), _none_named)


async def test_runs_up_to_the_bound_and_consecutive_groups_of_any_number_are_kept_exact() -> None:
    # The check refuses nothing a store keeping the contract reports: 1,024 scattered groups of a
    # 1,000-item call (the floor), and 5,000 consecutive ones (one range).
    def both(report: EraseReport, call: int) -> EraseReport:
        report = with_groups(*((FIRST + 2 * i, GOOD) for i in range(MAX_ERASE_RANGES)))(report, call)
        return with_groups(*((10_000 + i, GOOD) for i in range(5000)))(report, call)

    rt = runtime(BadReportArchive(both, "real"))
    await rt.run(ALICE, "s1", "turn")
    result = await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert result.tombstone is not None
    (session,) = (s for s in result.record.sessions if s.session == KEY)
    assert sum(1 for r in session.ranges if r.start >= FIRST) == MAX_ERASE_RANGES + 1
    assert any(r.start == 10_000 and r.stop == 15_000 for r in session.ranges)
    await rt.aclose()
