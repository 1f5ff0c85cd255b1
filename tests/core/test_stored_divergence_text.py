"""A stored divergence's detail and a stored receipt's digest hold only what the engine writes.

The detail is the archive's conflict by its class (its message, which may name another tenant's
rows, is only in the ``archive_diverged`` diagnostic, cut to ``MAX_DIVERGENCE_DETAIL_BYTES``, 16 KiB);
earlier versions kept the message (whole, at first), so a stored one loads up to
``MAX_STORED_DIVERGENCE_DETAIL_BYTES`` (256 KiB). A receipt's digest is a group's, ``sha256:`` and
64 lowercase hex digits. A stored snapshot holding anything else is damage: refused on decode by
every store (``decode_snapshot``), even with a matching digest, and the stored row is left as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from _stored_rows_support import KEY, KINDS, Rows, refused_and_left_alone, resealed, stored_rows

from agentium_harness import VerifiedIdentity
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits
from agentium_harness._engine.results import EvictionStatus
from agentium_harness._engine.runtime import RuntimeLimits
from agentium_harness._errors import ArchiveConflictError, InvalidArgumentError
from agentium_harness._history import MessageGroup
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.snapshot import (
    MAX_DIVERGENCE_DETAIL_BYTES,
    MAX_STORED_DIVERGENCE_DETAIL_BYTES,
    ArchivedDigest,
    ArchiveDivergence,
)
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio


@pytest.fixture(params=KINDS)
async def rows(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rows]:
    async with stored_rows(request.param, tmp_path) as held:
        yield held


DIGEST = "sha256:" + "0a" * 32


def _with_divergence(detail: str) -> Callable[[dict[str, Any]], None]:
    def edit(plain: dict[str, Any]) -> None:
        plain["divergence"] = {"detail": detail, "seqs": [5]}

    return edit


async def test_a_divergence_detail_past_the_stored_bound_is_refused_and_left_alone(rows: Rows) -> None:
    # The longest detail the engine writes (its cut) loads back as it was ...
    cut = "é" * (MAX_DIVERGENCE_DETAIL_BYTES // 2)
    rows.write(resealed(rows.data(), _with_divergence(cut)))
    loaded = await rows.store.load(KEY, OpContext())
    assert loaded is not None and loaded.snapshot.divergence.detail == cut
    # ... and so does a longer one an earlier version recorded whole from a third-party archive
    # (it failed the session's load as damage), up to the stored bound ...
    older = "conflict: " + "y" * (20 * 1024)
    for detail in (older, "é" * (MAX_STORED_DIVERGENCE_DETAIL_BYTES // 2)):
        rows.write(resealed(rows.data(), _with_divergence(detail)))
        loaded = await rows.store.load(KEY, OpContext())
        assert loaded is not None and loaded.snapshot.divergence.detail == detail
    # ... one byte more was written by no version.
    longest = "é" * (MAX_STORED_DIVERGENCE_DETAIL_BYTES // 2)
    await refused_and_left_alone(rows, resealed(rows.data(), _with_divergence(longest + "x")))
    with pytest.raises(InvalidArgumentError, match="detail"):
        ArchiveDivergence((5,), longest + "x")


NOT_DIGESTS = {
    "upper-case hex": "sha256:" + "0A" * 32,
    "another hash": "md5:" + "0a" * 16,
    "too short": "sha256:" + "0a" * 31,
    "a line after it": DIGEST + "\n",
    "free text": "conflict: see the archive",
}


@pytest.mark.parametrize("digest", list(NOT_DIGESTS.values()), ids=list(NOT_DIGESTS))
async def test_a_receipt_digest_not_of_the_engines_form_is_refused_and_left_alone(
    rows: Rows, digest: str
) -> None:
    def receipts(value: str) -> Callable[[dict[str, Any]], None]:
        def edit(plain: dict[str, Any]) -> None:
            plain["receipts"] = [{"digest": value, "seq": 4}]

        return edit

    rows.write(resealed(rows.data(), receipts(DIGEST)))
    loaded = await rows.store.load(KEY, OpContext())
    assert loaded is not None and loaded.snapshot.receipts == (ArchivedDigest(4, DIGEST),)
    await refused_and_left_alone(rows, resealed(rows.data(), receipts(digest)))
    with pytest.raises(InvalidArgumentError, match="digest"):
        ArchivedDigest(4, digest)


class _LongConflicts(InMemoryArchive):
    """An archive whose conflicts say far more than a stored divergence keeps (a third party's may)."""

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> list[ArchiveReceipt]:
        raise ArchiveConflictError("conflict " + "ü" * (4 * MAX_DIVERGENCE_DETAIL_BYTES))


async def test_the_engine_cuts_a_long_conflict_message_and_the_session_loads_again() -> None:
    # What the engine records it must read back: the detail is cut to the bound the decoder checks.
    store = InMemorySessionStore()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=_LongConflicts(),
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    alice = VerifiedIdentity("tenant-a", "alice", "test-auth")
    try:
        await rt.run(alice, "s1", "q0")
        result = await rt.run(alice, "s1", "q1")
        assert result.eviction is EvictionStatus.DIVERGED
        loaded = await store.load(SessionKey("tenant-a", "alice", "s1"), OpContext())
        assert loaded is not None and loaded.snapshot.divergence is not None
        # The record is committed: the archive's message (another tenant's rows, perhaps) is never in
        # it, only its class; the diagnostic has the message, cut to the same bound.
        detail = loaded.snapshot.divergence.detail
        assert detail.startswith("ArchiveConflictError") and "ü" not in detail
        assert len(detail.encode("utf-8")) <= MAX_DIVERGENCE_DETAIL_BYTES
        (note,) = [d for d in result.diagnostics if d.code == "archive_diverged"]
        said = note.message.split(detail + ": ", 1)[1]
        assert said.startswith("conflict üü") and said.endswith("bytes, cut]")
        assert len(said.encode("utf-8")) <= MAX_DIVERGENCE_DETAIL_BYTES
        view = await rt.inspect_session(alice, "s1")
        assert view.divergence == loaded.snapshot.divergence
    finally:
        await rt.aclose()
