"""Runs that meet recall contract violations (and notes), and what they said of them.

Shared by the tests of how a run lists, warns of and counts a recall store's
contract violations: a run with ``looks`` tool rounds (a document fence look
before each later model call), a run whose first round asks a clarification,
the violations a run said (each one WARNING and one span event), and a store
whose every session close fails.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _recall_support import ANA, Scripted, ScriptedSession, runtime
from _telemetry_support import Telemetered

from agentium_harness import (
    EffectLevel,
    PolicyDecision,
    PolicyInput,
    RecallDecision,
    RecallLimits,
    RecallPolicy,
    Tool,
    ToolRegistry,
    current_session_recall_policy,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext

VIOLATION = "recall_contract_violation"


async def _deploy(args: Any) -> str:
    return "deployed"


async def deploy_run(
    store: Scripted, looks: int, caplog: pytest.LogCaptureFixture, **kw: Any
) -> tuple[Any, Telemetered]:
    """A committed run making ``looks`` tool rounds; its result and its telemetry, the WARNING records
    in ``caplog``. ``kw`` goes to the runtime (``recall_limits``, say)."""
    t = Telemetered()
    rt, _, _ = runtime(
        store,
        ScriptedProvider(replies=[DEPLOY] * looks + ["Deployed."]),
        tools=ToolRegistry([Tool("deploy", _deploy, EffectLevel.WRITE)]),
        recall_policy=current_session_recall_policy(on_partial="continue"),
        telemetry=t.telemetry(),
        **kw,
    )
    async with rt:
        with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "Thursday?", grants=["deploy"])
    assert result.committed, result.diagnostics
    return result, t


def said(result: Any, caplog: pytest.LogCaptureFixture, t: Telemetered) -> list[str]:
    """The run's violation diagnostics, checked to be one WARNING record and one span event each."""
    found = [d.message for d in result.diagnostics if d.code == VIOLATION]
    records = [r for r in caplog.records if getattr(r, "agentium_code", None) == VIOLATION]
    assert all(r.levelno == logging.WARNING for r in records)
    events = [e for _, _, e in t.events("agentium.diagnostic") if e["agentium.diagnostic.code"] == VIOLATION]
    assert len(records) == len(events) == len(found), (len(records), len(events), len(found))
    return found


def _clarify_then_continue(seen: PolicyInput) -> PolicyDecision:
    if not seen.clarified:
        return PolicyDecision(RecallDecision.CLARIFY, "ask", "Which train?")
    return PolicyDecision(RecallDecision.CONTINUE, "go on")


async def _answer(question: str) -> str:
    return "the Thursday one"


async def clarified_run(
    store: Scripted,
    user_input: str,
    limits: RecallLimits,
    caplog: pytest.LogCaptureFixture | None = None,
    **kw: Any,
) -> Any:
    """A run whose first dispatch round asks a clarification (answered) and whose second goes on; its
    result. With ``caplog``, its WARNING records are captured; ``kw`` goes to the runtime."""
    policy = RecallPolicy(name="clarify-then-continue", decide=_clarify_then_continue)
    rt, _, _ = runtime(store, recall_policy=policy, recall_limits=limits, **kw)
    watching = caplog.at_level(logging.WARNING, logger="agentium") if caplog is not None else nullcontext()
    async with rt:
        with watching, anyio.fail_after(30):
            result = await rt.run(ANA, "s1", user_input, clarify=_answer)
    assert result.recall.clarification is not None
    return result


class CloseFails(Scripted):
    """Every session's close fails, each time in other words: one note of one kind."""

    closes = 0

    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _CloseFails:
        return _CloseFails(self)


class _CloseFails(ScriptedSession):
    def __init__(self, store: CloseFails) -> None:
        super().__init__(store)
        self.owner = store

    async def close(self) -> None:
        self.owner.closes += 1
        raise RuntimeError(f"close number {self.owner.closes} refused")
