"""``RuntimeLimits.model_timeout_s``: the model call's own deadline, apart from the store calls' one.

Before it, ``op_timeout_s`` bounded every adapter call of a run, the model's
too: a host whose model takes a minute had to let a hung session store hang
for a minute as well, and a test that wanted the model call to time out had to
put every store call under the same short deadline.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio
import pytest
from _session_store_support import HangingStore
from _short_deadline import short_only_for
from _slow_provider import SlowProvider

from agentium_harness import SessionKey, VerifiedIdentity
from agentium_harness._config import parse_config
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.limits import RuntimeLimits
from agentium_harness._engine.results import CommitState, RunStatus
from agentium_harness._errors import (
    ConfigError,
    InvalidArgumentError,
    OperationTimeoutError,
    ProviderTimeoutError,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("tenant-a", "alice", "test-auth")
KEY = SessionKey("tenant-a", "alice", "s1")
#: Scheduling slack on a loaded two-core machine: far under what a bound left unenforced would take.
SLACK_S = 10.0


def build(limits: RuntimeLimits, **kw: Any) -> Any:
    return create_harness_runtime(
        provider=kw.pop("provider", None) or ScriptedProvider(replies=["ok"], cycle=True),
        archive=kw.pop("archive", None) or InMemoryArchive(),
        session_store=kw.pop("store", None) or InMemorySessionStore(),
        limits=limits,
        **kw,
    )


async def test_a_model_slower_than_op_timeout_completes_under_model_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The store calls, not the subject, get 30 s (a stalled machine must not fail them); the model
    # call keeps whatever deadline the engine gives it (the helper never widens it).
    short_only_for(monkeypatch)
    provider = SlowProvider(delay=0.5)
    rt = build(RuntimeLimits(op_timeout_s=0.2, model_timeout_s=30.0), provider=provider)
    result = await rt.run(ALICE, "s1", "q")
    assert result.status is RunStatus.COMPLETED
    assert result.commit_state is CommitState.COMMITTED
    assert result.output == "answer"
    await rt.aclose()


async def test_a_model_past_model_timeout_times_out_while_stores_keep_op_timeout() -> None:
    store, gate = InMemorySessionStore(), anyio.Event()
    await build(RuntimeLimits(), store=store).run(ALICE, "s1", "q0")
    before = store._rows.get(KEY)
    provider = SlowProvider(gate=gate)
    rt = build(RuntimeLimits(op_timeout_s=30.0, model_timeout_s=0.3), store=store, provider=provider)
    started = time.monotonic()
    try:
        with pytest.raises(ProviderTimeoutError, match=r"did not answer within 0\.3s") as info:
            await rt.run(ALICE, "s1", "q1")
        assert time.monotonic() - started < SLACK_S
    finally:
        gate.set()
    cause = info.value.__cause__
    assert isinstance(cause, OperationTimeoutError)
    assert cause.operation == "provider complete" and cause.timeout_s == 0.3
    assert info.value.commit_state is CommitState.NOT_COMMITTED
    assert provider.contexts[0].signal.cancelled
    assert store._rows.get(KEY) == before  # the session was not changed
    await rt.aclose()


async def test_a_hung_session_save_still_times_out_at_op_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    store = HangingStore()
    await build(RuntimeLimits(), store=store).run(ALICE, "s1", "q0")
    before = store._rows.get(KEY)
    store.hang_save = True
    # Only the save runs under the short op_timeout_s: the run's load before it is to succeed.
    kept = short_only_for(monkeypatch, "session save")
    rt = build(RuntimeLimits(op_timeout_s=0.3, model_timeout_s=30.0), store=store)
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError, match="session save") as info:
        await rt.run(ALICE, "s1", "q1")
    assert time.monotonic() - started < SLACK_S
    assert info.value.timeout_s == 0.3 and kept.kept == [("session save", 0.3)]
    assert store._rows.get(KEY) == before
    store.hang_save = False
    await rt.aclose()


def test_model_timeout_defaults_to_none_meaning_op_timeout() -> None:
    assert RuntimeLimits().model_timeout_s is None
    assert RuntimeLimits(model_timeout_s=90).model_timeout_s == 90


@pytest.mark.parametrize("bad", [True, False, math.nan, math.inf, -1.0, 0, 0.0, 1e308, 3601, "30"])
def test_a_bad_model_timeout_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="model_timeout_s"):
        RuntimeLimits(model_timeout_s=bad)  # type: ignore[arg-type]


BASE = """
[provider]
plugin = "scripted"

[archive]
plugin = "memory"

[session_store]
plugin = "memory"
"""


def test_model_timeout_round_trips_from_the_runtime_section() -> None:
    config = parse_config(BASE + "\n[runtime]\nop_timeout_s = 5\nmodel_timeout_s = 90\n", environ={})
    assert config.runtime.limits == RuntimeLimits(op_timeout_s=5.0, model_timeout_s=90.0)
    assert isinstance(config.runtime.limits.model_timeout_s, float)
    assert parse_config(BASE, environ={}).runtime.limits.model_timeout_s is None


@pytest.mark.parametrize("value", ["0", "-1", "1e308", "nan", "true", '"soon"'])
def test_a_bad_model_timeout_in_the_config_points_at_its_key(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + f"\n[runtime]\nmodel_timeout_s = {value}\n", environ={})
    assert [issue.path for issue in info.value.issues] == ["$.runtime.model_timeout_s"]
