"""A store's erase report whose digests or free text break the port's form is a contract violation.

What a store reports goes into the erasure's stored record, its tombstone: each group's
digest, the counts per kind, the store's ``detail``. A digest that was not ``sha256:`` and
64 lowercase hex digits (100 MB of text, another hash, upper case) was kept as it came, and
so were a detail or a kind of any size and any number of kinds. Each is refused as a
:class:`ContractViolationError` on the path of every other bad report: a dry run raises it,
a real erasure stops pending with it as the cause, no store's entry is marked complete, and
nothing of the report is kept; once the adapter behaves, a resume completes the erasure.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
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

from agentium_harness._validators import MAX_COUNT
from agentium_harness.plugin_api import ErasedCount, ErasedSession, EraseReport, EraseStatus

pytestmark = pytest.mark.anyio

#: A group the session does not hold (its snapshot has group 0 only): only the bad report names it.
SEQ = 7


def _with_digest(digest: str) -> Tamper:
    return with_groups((SEQ, digest))


def _with_detail(detail: str) -> Tamper:
    return lambda report, _: attrs.evolve(report, detail=detail)


def _with_counts(*counts: ErasedCount) -> Tamper:
    return lambda report, _: attrs.evolve(report, counts=(*report.counts, *counts))


def _with_entries(n: int) -> Tamper:
    # Entries naming the target's session and no group: each inside the target, too many in all.
    return lambda report, _: attrs.evolve(report, sessions=(*report.sessions, *(ErasedSession(KEY),) * n))


def _with_session(session: object) -> Tamper:
    def tamper(report: EraseReport, _: int) -> EraseReport:
        entry = ErasedSession(KEY)
        object.__setattr__(entry, "session", session)  # what a broken adapter may hand back
        return attrs.evolve(report, sessions=(*report.sessions, entry))

    return tamper


def _twice(counts: Callable[[int], tuple[ErasedCount, ...]]) -> Tamper:
    """``counts(call)`` added to each real call's report; the first says partial (one item removed)."""

    def tamper(report: EraseReport, call: int) -> EraseReport:
        if call == 1:
            first = (ErasedCount("group", 1), *counts(call))
            return attrs.evolve(report, counts=first, status=EraseStatus.PARTIAL)
        return attrs.evolve(report, counts=(*report.counts, *counts(call)))

    return tamper


BAD_DIGESTS = {
    "one hex digit too many": GOOD + "0",
    "a megabyte of text": "x" * (1 << 20),
    "another hash": "sha512:" + "0" * 64,
    "no prefix": "0" * 64,
    "upper-case hex": "sha256:" + "A" * 64,
    "a NUL": "\x00",
}

BAD_FIELDS: dict[str, Tamper] = {
    "a detail of 64 KiB": _with_detail("d" * 65536),
    "a detail with a NUL": _with_detail("freed\x00pages"),
    "a kind of 1 KiB": _with_counts(ErasedCount("k" * 1024, 0)),
    "an empty kind": _with_counts(ErasedCount("", 0)),
    "a kind with a control character": _with_counts(ErasedCount("gr\noup", 0)),
    "a thousand kinds": _with_counts(*(ErasedCount(f"kind{i}", 0) for i in range(1000))),
    "a session that is not a SessionKey": _with_session("acme/alice/s1"),
}


@pytest.mark.parametrize("digest", BAD_DIGESTS.values(), ids=BAD_DIGESTS.keys())
async def test_a_dry_run_refuses_a_report_with_a_malformed_digest_as_a_contract_violation(
    digest: str,
) -> None:
    refused = await dry_run_refused(BadReportArchive(_with_digest(digest), "dry"), r"archive.*digest")
    assert len(str(refused)) < 1000  # the text itself is never shown


@pytest.mark.parametrize("tamper", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
async def test_a_dry_run_refuses_a_report_with_an_unbounded_field_as_a_contract_violation(
    tamper: Tamper,
) -> None:
    await dry_run_refused(BadReportArchive(tamper, "dry"))


@pytest.mark.parametrize("on", ["dry", "real"])
@pytest.mark.parametrize("digest", BAD_DIGESTS.values(), ids=BAD_DIGESTS.keys())
async def test_an_erasure_meeting_a_report_with_a_malformed_digest_stops_pending(
    digest: str, on: str
) -> None:
    await stops_pending_then_resumes(BadReportArchive(_with_digest(digest), on))


@pytest.mark.parametrize("on", ["dry", "real"])
@pytest.mark.parametrize("tamper", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
async def test_an_erasure_meeting_a_report_with_an_unbounded_field_stops_pending(
    tamper: Tamper, on: str
) -> None:
    await stops_pending_then_resumes(BadReportArchive(tamper, on))


async def test_an_erasure_meeting_more_session_entries_than_its_call_bound_stops_pending() -> None:
    # A real call is bounded to 1,000 items (DEFAULT_ERASE_BATCH): each entry stands for one at least.
    await stops_pending_then_resumes(BadReportArchive(_with_entries(1001), "real"))


TWICE = {
    "a count summed past MAX_COUNT": _twice(lambda _: (ErasedCount("revision", MAX_COUNT),)),
    "kinds united past the bound": _twice(
        lambda call: tuple(ErasedCount(f"k{call}.{i}", 0) for i in range(20))
    ),
}


@pytest.mark.parametrize("tamper", TWICE.values(), ids=TWICE.keys())
async def test_counts_summed_over_calls_past_their_bounds_are_a_contract_violation(tamper: Tamper) -> None:
    # Each report is within the bounds; the store's entry in the record, summed over calls, is not.
    await stops_pending_then_resumes(BadReportArchive(tamper, "real"))


async def test_a_report_with_well_formed_digests_and_bounded_fields_completes() -> None:
    # The checks refuse nothing an adapter keeping the contract reports.
    ok = BadReportArchive(
        lambda r, _: attrs.evolve(
            _with_digest(GOOD)(r, 0),
            detail="d" * 4000,
            counts=(*r.counts, *(ErasedCount(f"kind{i}", 0) for i in range(31))),
        ),
        "real",
    )
    rt = runtime(ok)
    await rt.run(ALICE, "s1", "turn")
    result = await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert result.tombstone is not None
    assert (SEQ, GOOD) in next(s for s in result.record.sessions if s.session == KEY).digests
    await rt.aclose()


async def test_a_group_reported_with_no_digest_is_erased_and_recorded_with_none() -> None:
    # "" is the store saying it found no digest it can vouch for (S3 metadata gone, a damaged
    # SQLite digest): damage the operator asked to remove never stops the erasure.
    rt = runtime(BadReportArchive(_with_digest(""), "real"))
    await rt.run(ALICE, "s1", "turn")
    result = await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert result.tombstone is not None
    assert (SEQ, "") in next(s for s in result.record.sessions if s.session == KEY).digests
    await rt.aclose()
