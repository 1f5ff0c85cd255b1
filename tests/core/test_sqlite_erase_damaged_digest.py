"""A runtime erasure removes a SQLite session whose stored group digest is damaged, and completes.

The SQLite stores erase a group whose digest is over its read bound unread
and report it with digest ``""`` (no digest they can vouch for). The engine's
report check (``erasure_reports.check_report``) must take that as what it is:
it first refused every digest not of the ``sha256:`` form, ``""`` included,
which left such an erasure pending on the very damage the operator asked to
remove, on every retry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _oversize_support import HUGE
from _oversize_support import raw_sql as _sql

from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters import _sqlite_rows
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")


def _runtime(path: Path) -> HarnessRuntime:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["x"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


@pytest.mark.parametrize("target", ["session", "user"])
async def test_a_runtime_erasure_completes_over_a_group_whose_digest_is_damaged(
    tmp_path: Path, target: str
) -> None:
    path = tmp_path / "a.db"
    async with _runtime(path) as rt:
        for n in range(5):  # groups 0-2 archived (adopted), 3 and 4 resident
            await rt.append(ANA, "s1", [Message(Role.USER, f"q{n}"), Message(Role.ASSISTANT, f"a{n}")])
    [(sid,)] = _sql(path, "SELECT sid FROM sessions WHERE session_id = 's1'")
    assert isinstance(sid, int)
    ids = (_sqlite_rows.row_id(sid, 1, False), _sqlite_rows.row_id(sid, 1, True))
    _sql(path, "UPDATE groups SET digest = printf('%.*c', ?, 'x') WHERE id IN (?, ?)", (HUGE, *ids))
    erase = EraseTarget.user("acme", "ana")
    if target == "session":
        erase = EraseTarget.session("acme", "ana", "s1")
    async with _runtime(path) as rt:
        result = await rt.erase(erase, reason="request", attestation=OPERATOR)
    assert result.tombstone is not None, result
    recorded = {seq: digest for s in result.record.sessions for seq, digest in s.digests}
    # The damaged group is recorded with no digest; its neighbours with theirs.
    assert recorded[1] == "" and recorded[0].startswith("sha256:") and recorded[2].startswith("sha256:")
    assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]
