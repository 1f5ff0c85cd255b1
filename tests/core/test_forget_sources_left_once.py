"""A forget's source cited by another digest is one WARNING and one event: not also "never held".

``runtime.forget(..., erase_sources=True)`` reports a cited group whose
stored digest differs (the provenance does not name it) with its own
WARNING and the event ``agentium.forget.provenance_mismatch``. The
"sources left" WARNING and ``agentium.forget.sources_left`` count only the
sources it could not erase for another cause (still resident, never held):
the mismatched group is neither, and one degraded outcome is one WARNING.
"""

from __future__ import annotations

import logging

import anyio
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    MemoryFact,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import GroupRef, Message, Role

pytestmark = pytest.mark.anyio

SECRET = "QZV-secret-4417"
ANA = VerifiedIdentity("acme", "ana", "test-auth")
SCOPE = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")


@pytest.mark.parametrize("also_not_held", [False, True])
async def test_a_mismatched_source_is_warned_once_and_only_never_held_ones_are_left(
    caplog: pytest.LogCaptureFixture, also_not_held: bool
) -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        telemetry=t.telemetry(),
    )
    cited = [GroupRef("s1", 1, "sha256:" + "0" * 64)]  # group 1 is stored (archived), by another digest
    if also_not_held:
        cited.append(GroupRef("s1", 40, "sha256:" + "1" * 64))  # never stored in s1
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        async with runtime:
            for n in range(5):  # groups 0-2 archived, 3 and 4 resident
                messages = [Message(Role.USER, f"{SECRET} q{n}"), Message(Role.ASSISTANT, f"a{n}")]
                await runtime.append(ANA, "s1", messages)
            ack = await runtime.memory.remember(MemoryFact(SCOPE, f"{SECRET} likes tea", provenance=cited))
            assert ack.fact_id is not None
            t.exporter.clear()
            result = await runtime.forget(
                SCOPE, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR
            )
    assert result.erasures == ()
    warnings = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.memory"]
    mismatch = [w for w in warnings if "digest" in w]
    left = [w for w in warnings if "not erased" in w]
    assert len(mismatch) == 1
    events = [(e[1], e[2]) for e in t.events("agentium.forget.")]
    assert ("agentium.forget.provenance_mismatch", {"agentium.forget.groups": 1}) in events
    if also_not_held:
        # The group never stored is left for its own cause: counted, the mismatched one not.
        assert len(left) == 1 and "1 never held" in left[0]
        assert (
            "agentium.forget.sources_left",
            {"agentium.forget.resident": 0, "agentium.forget.not_held": 1},
        ) in events
    else:
        assert left == []
        assert [name for name, _ in events] == ["agentium.forget.provenance_mismatch"]
    for text in (*t.carried(), *warnings):
        assert SECRET not in text, text
