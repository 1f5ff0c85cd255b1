"""A provider's ContractViolationError is raised as a fresh copy: the provider's object is never marked.

``complete_bounded`` passed a provider's own ``ContractViolationError`` on
as it came (when it carried no other run's marks). The engine then marked
that object: a run whose tools ran set its ``commit_state``, its
``run_result`` and "committed as group N" in its message. A provider that
keeps one exception object and raises it again (in another tenant's run)
had that run wrap the marked object: the other run's claims were committed
into its history ("…the turn was committed…; the session was not changed")
and its ``__cause__`` held the first run's result. And a ``committed_detail``
the provider set was committed as found: one that is no text failed the
commit of what ran (an unexpected TypeError), the tool's write not kept.
"""

from __future__ import annotations

from typing import Any

import pytest
from _committed_words_support import committed_detail, failed_runs, noting_runtime

from agentium_harness import (
    AgentiumError,
    ContractViolationError,
    InterruptionCause,
    VerifiedIdentity,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

SAID = "the model's reply broke its contract"
TENANTS = [VerifiedIdentity("acme", "ana", "test-auth"), VerifiedIdentity("globex", "bob", "test-auth")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FailsAfterATool(ScriptedProvider):
    """Asks for the tool, then raises ``error`` (one object, every time) on the call after it."""

    def __init__(self, error: ContractViolationError) -> None:
        super().__init__(replies=[{"content": "", "tool_calls": [{"id": "t1", "name": "note"}]}], cycle=True)
        self.error = error
        self.count = 0

    async def complete(self, request: Any, ctx: Any) -> Any:
        self.count += 1
        if self.count % 2 == 0:
            raise self.error
        return await super().complete(request, ctx)


async def _runs(error: ContractViolationError, identities: list[VerifiedIdentity]) -> list[AgentiumError]:
    """One run per identity, each in its own session: its tool runs, then the provider raises ``error``."""
    rt = noting_runtime(FailsAfterATool(error), InMemoryArchive(), InMemorySessionStore())
    return await failed_runs(rt, identities)


def _detail(error: AgentiumError) -> str:
    """The committed ``provider_failed`` detail of the run ``error`` stopped (its tool run committed)."""
    return committed_detail(error, InterruptionCause.PROVIDER_FAILED)


async def test_a_providers_reused_error_is_never_marked_so_another_tenants_run_commits_its_words() -> None:
    shared = ContractViolationError(SAID)
    first, second = await _runs(shared, TENANTS)
    for error, identity in zip((first, second), TENANTS, strict=True):
        assert type(error) is ContractViolationError and error is not shared and error.__cause__ is shared
        assert str(error).startswith(SAID) and str(error).count("committed as group") == 1, str(error)
        assert _detail(error) == f"ContractViolationError: {SAID}"
        assert error.run_result is not None and error.run_result.retained.scope.tenant == identity.tenant
    assert shared.commit_state is None and shared.run_result is None and shared.args == (SAID,)


async def test_a_committed_detail_the_provider_set_is_not_committed() -> None:
    # Not the engine's words: one that is no text failed the commit of what ran (the tool's write lost).
    error = ContractViolationError(SAID)
    error.committed_detail = 12345  # type: ignore[assignment]  # a hostile provider's
    (caught,) = await _runs(error, TENANTS[:1])
    assert type(caught) is ContractViolationError
    assert _detail(caught) == f"ContractViolationError: {SAID}"
