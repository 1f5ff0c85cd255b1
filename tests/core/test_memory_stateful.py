"""Stateful property: remember, correct, forget and close across two tenants match a simple model.

The SQLite memory store is real (a file per example); the model says which
facts each tenant holds. After every step: each tenant lists exactly its
current facts, lookups never show another tenant's or a forgotten fact, and
refused calls (another tenant's id, a forgotten fact, a closed agent) changed
nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio.from_thread
import pytest
from _memory_support import RecordingProvider, sqlite_store
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from agentium_harness import (
    AckStatus,
    Agent,
    AgentLifecycleError,
    AgentState,
    MemoryFact,
    MemoryFactForgottenError,
    MemoryFactNotFoundError,
    MemoryManager,
    MemoryScope,
)
from agentium_harness.plugin_api import OpContext

T = TypeVar("T")

TENANTS = {"a": MemoryScope("tenant-a", "same-user"), "b": MemoryScope("tenant-b", "same-user")}
TEXTS = st.sampled_from(["likes tea", "likes coffee", "lives in Leeds", "lives in York", "uses vim"])
WHO = st.sampled_from(sorted(TENANTS))


class MemoryLifecycle(RuleBasedStateMachine):
    facts = Bundle("facts")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="agentium-memory-"))
        self.portal_cm = anyio.from_thread.start_blocking_portal()
        self.portal = self.portal_cm.__enter__()
        self.store = sqlite_store(self.dir)
        self.manager = MemoryManager(self.store)
        self.agents = {who: self._agent(who) for who in TENANTS}
        # fact id -> [owner, text or None when forgotten, revision]
        self.model: dict[str, list[Any]] = {}

    def _agent(self, who: str) -> Agent:
        return Agent(RecordingProvider(), self.manager, TENANTS[who], session=f"agent-{who}")

    def call(self, work: Callable[[], Awaitable[T]]) -> T:
        return self.portal.call(work)

    def current(self, who: str) -> list[str]:
        return sorted(v[1] for v in self.model.values() if v[0] == who and v[1] is not None)

    @rule(target=facts, who=WHO, text=TEXTS)
    def remember(self, who: str, text: str) -> str:
        agent = self.agents[who]
        if agent.state is AgentState.CLOSED:
            with pytest.raises(AgentLifecycleError):
                self.call(lambda: agent.remember(MemoryFact(TENANTS[who], text)))
            return "m-" + "0" * 32  # an id that exists nowhere
        ack = self.call(lambda: agent.remember_with_result(MemoryFact(TENANTS[who], text)))
        same = [fid for fid, v in self.model.items() if v[0] == who and v[1] == text]
        if same:
            assert ack.status is AckStatus.DUPLICATE and ack.fact_id == same[0]
        else:
            assert ack.status is AckStatus.STORED and ack.revision == 1
            assert ack.fact_id is not None
            self.model[ack.fact_id] = [who, text, 1]
        assert ack.fact_id is not None
        return ack.fact_id

    @rule(fact=facts, who=WHO, text=TEXTS)
    def correct(self, fact: str, who: str, text: str) -> None:
        entry = self.model.get(fact)
        replacement = MemoryFact(TENANTS[who], text)
        if entry is None or entry[0] != who:
            with pytest.raises(MemoryFactNotFoundError):
                self.call(lambda: self.manager.correct(TENANTS[who], fact, replacement))
            return
        if entry[1] is None:
            with pytest.raises(MemoryFactForgottenError):
                self.call(lambda: self.manager.correct(TENANTS[who], fact, replacement))
            return
        duplicate_elsewhere = any(v[0] == who and v[1] == text and k != fact for k, v in self.model.items())
        if duplicate_elsewhere:
            return  # the store allows it, but the model's duplicate rule would need history; skip
        ack = self.call(lambda: self.manager.correct(TENANTS[who], fact, replacement))
        if entry[1] == text:
            assert ack.status is AckStatus.DUPLICATE and ack.revision == entry[2]
        else:
            assert ack.status is AckStatus.STORED and ack.revision == entry[2] + 1
            entry[1], entry[2] = text, entry[2] + 1

    @rule(fact=facts, who=WHO)
    def forget(self, fact: str, who: str) -> None:
        entry = self.model.get(fact)
        if entry is None or entry[0] != who:
            with pytest.raises(MemoryFactNotFoundError):
                self.call(lambda: self.manager.forget(TENANTS[who], fact))
            return
        ack = self.call(lambda: self.manager.forget(TENANTS[who], fact))
        if entry[1] is None:
            assert ack.status is AckStatus.DUPLICATE
        else:
            assert ack.status is AckStatus.STORED and ack.revision == entry[2] + 1
            entry[1], entry[2] = None, entry[2] + 1

    @rule(fact=consumes(facts), who=WHO)
    def check_history(self, fact: str, who: str) -> None:
        entry = self.model.get(fact)
        if entry is None or entry[0] != who:
            return
        history = self.call(lambda: self.manager.history(TENANTS[who], fact))
        assert [h.revision for h in history] == list(range(1, entry[2] + 1))
        if entry[1] is None:
            assert all(h.text == "" for h in history)

    @rule(who=WHO)
    def close(self, who: str) -> None:
        self.call(self.agents[who].close)
        assert self.agents[who].state is AgentState.CLOSED

    @rule(who=WHO)
    def reopen(self, who: str) -> None:
        if self.agents[who].state is AgentState.CLOSED:
            self.agents[who] = self._agent(who)

    @rule()
    def restart_store(self) -> None:
        """Close everything and reopen the file: acknowledged writes are all still there."""
        for agent in self.agents.values():
            self.call(agent.close)
        self.call(self.store.aclose)
        self.store = sqlite_store(self.dir)
        self.manager = MemoryManager(self.store)
        self.agents = {who: self._agent(who) for who in TENANTS}

    @invariant()
    def each_tenant_sees_exactly_its_current_facts(self) -> None:
        for who, scope in TENANTS.items():
            listed = self.call(lambda s=scope: self.store.list_facts(s, 200, OpContext.with_timeout(30.0)))
            assert sorted(f.text for f in listed) == self.current(who)
            looked = self.call(
                lambda s=scope: self.store.lookup(s, "likes lives uses", 200, OpContext.with_timeout(30.0))
            )
            assert all(f.scope == scope for f in looked)
            assert sorted(f.text for f in looked) == self.current(who)

    def teardown(self) -> None:
        try:
            for agent in self.agents.values():
                self.call(agent.close)
            self.call(self.store.aclose)
        finally:
            self.portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.dir, ignore_errors=True)


MemoryLifecycle.TestCase.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)
TestMemoryLifecycle = MemoryLifecycle.TestCase
