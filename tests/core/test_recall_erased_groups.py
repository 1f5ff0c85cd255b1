"""A recalled excerpt of a group the session's erasures removed never reaches the model.

The snapshot says which seqs an erasure (retention, a forgotten fact's
sources) removed. A recall store that still answers with such a group (an
index row its erasure missed, a stale replica, a host indexing behind the
runtime's back) is not trusted on it: the source is hidden, like a retracted
group's, rather than shown on one line with its roles unchecked.
"""

from __future__ import annotations

import anyio
import pytest
from _recall_erasure_support import ANA, KEY, SECRET, Recording, recall_runtime

from agentium_harness import OperatorAttestation, RetentionPolicy, RunStatus, VerifiedIdentity
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.plugin_api import ArchiveReceipt, OpContext

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))


async def test_an_erased_groups_excerpt_is_hidden_not_shown_on_one_line() -> None:
    provider, recall = Recording(), InMemoryRecallStore()
    runtime = recall_runtime(provider, recall, retention=RetentionPolicy(max_archived_groups=2))
    try:
        with anyio.fail_after(30):
            await runtime.run(ANA, "s1", SECRET)
            for i in range(5):
                await runtime.run(ANA, "s1", f"Unrelated chatter number {i}.")
            page = await runtime.read_history(ANA, "s1", max_groups=1, before_seq=1, view=False)
            [erased] = [g.group for g in page.groups]
            result = await runtime.apply_retention(OPERATOR)
            assert result.erasures and (await runtime.inspect_session(ANA, "s1")).erased
            # The store answers with the erased group again (an index row its erasure missed).
            receipt = ArchiveReceipt(0, erased.digest, "stale")
            await recall.index_groups(KEY, [erased], [receipt], OpContext.with_timeout(10.0))
            run = await runtime.run(ANA, "s1", "What is my quince account password?")
    finally:
        await runtime.aclose()
    assert run.status is RunStatus.COMPLETED
    request = provider.requests[-1]
    shown = [b.source_id for b in request.sources]  # type: ignore[attr-defined]
    assert "group/acme/ana/s1/0" not in shown
    assert "tangerine" not in repr(request)
    notes = [d.message for d in run.diagnostics if d.code == "recall_note"]
    assert any("erased" in n and "group/acme/ana/s1/0" in n for n in notes), notes
