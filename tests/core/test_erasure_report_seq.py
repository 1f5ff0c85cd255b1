"""A store's erase report naming a group seq no group can have is the adapter's contract violation.

A report naming seq ``MAX_SEQ + 1`` (or a negative one) inside the target passed the
report's check and then failed building the merged record with
:class:`InvalidArgumentError`: bad input of the host's, which it was not. It is refused
as what it is, a :class:`ContractViolationError`, on the same path as every other bad
report: a dry run raises it, a real erasure stops pending with it as the cause, and no
store's entry is marked complete.
"""

from __future__ import annotations

import pytest
from _erasure_report_harness import (
    GOOD,
    BadReportArchive,
    dry_run_refused,
    stops_pending_then_resumes,
    with_groups,
)

from agentium_harness import ErasureRecord
from agentium_harness._validators import MAX_SEQ

pytestmark = pytest.mark.anyio


def _bad_seq_archive(seq: int, on: str) -> BadReportArchive:
    """A broken adapter: its ``on`` calls' reports add a group of the target's session at ``seq``."""
    return BadReportArchive(with_groups((seq, GOOD)), on)


@pytest.mark.parametrize("seq", [MAX_SEQ + 1, -1])
async def test_a_dry_run_refuses_a_report_naming_an_impossible_seq_as_a_contract_violation(seq: int) -> None:
    await dry_run_refused(_bad_seq_archive(seq, "dry"))


@pytest.mark.parametrize("on", ["dry", "real"])
@pytest.mark.parametrize("seq", [MAX_SEQ + 1, -1])
async def test_an_erasure_meeting_a_report_naming_an_impossible_seq_stops_pending(seq: int, on: str) -> None:
    def kept(record: ErasureRecord) -> None:
        # No group the bad report named.
        assert all(seq not in r for s in record.sessions for r in s.ranges)

    await stops_pending_then_resumes(_bad_seq_archive(seq, on), kept)
